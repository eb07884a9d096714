package core

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/flowrun/flow/pkg/event"
)

// kindUpsert is the identity kind of an UpsertAttributes decision.
const kindUpsert = "upsert"

// UpsertAttributes sets search attributes of the run, recorded as attributes.upserted. Each value
// replaces the attribute's previous one; attributes it does not name keep theirs.
//
// An upsert has a stable ID, like every other decision, because Flow asks the code for one
// decision at a time against the whole history, instead of re-running it from the start: the ID
// is how replay knows which recorded upsert the code is issuing again, so that it can compare the
// values attribute by attribute (a difference is a non-determinism error naming the attribute),
// and how the code knows it already upserted ([Snapshot.Upserts], flow's ctx.Upserted) and goes
// on. A value-based identity would make two upserts of the same values one decision, and an
// identity by position would not survive a change of code that adds a decision before it.
type UpsertAttributes struct {
	ID         string
	Attributes event.Attributes
}

func (UpsertAttributes) decision() {}

func (d UpsertAttributes) Describe() string { return describe("UpsertAttributes", d.ID) }

// Upsert is one recorded attributes.upserted decision.
type Upsert struct {
	ID         string           `json:"id"`
	Attributes event.Attributes `json:"attributes"`
	Seq        uint64           `json:"seq"`
}

// upserted applies a checked attributes.upserted event. s.Attributes is replaced by a merged
// copy, never changed in place, so that a Summary taken earlier keeps the values it was taken
// with.
func (s *Snapshot) upserted(e event.Envelope, d *event.AttributesUpserted) {
	if s.Upserts == nil {
		s.Upserts = map[string]*Upsert{}
	}
	s.Upserts[d.UpsertID] = &Upsert{ID: d.UpsertID, Attributes: d.Attributes, Seq: e.Seq}
	s.ids[d.UpsertID] = kindUpsert
	s.Attributes = s.Attributes.Merge(d.Attributes)
}

// changesAttributes reports whether p changes the run's search attributes, and so its summary.
func changesAttributes(p event.Payload) bool {
	_, ok := p.(*event.AttributesUpserted)
	return ok
}

// upsert validates an UpsertAttributes decision: a new one is recorded; one already recorded
// under its ID is compared attribute by attribute and, when equal, refused as already settled,
// since an upsert takes effect when it is committed and leaves nothing to wait for.
func (v validation) upsert(d UpsertAttributes) (Verdict, error) {
	s := v.s
	if err := event.ValidateID("upsert", d.ID); err != nil {
		return v.invalid("%v", err)
	}
	if len(d.Attributes) == 0 {
		return v.invalid("UpsertAttributes(%q) sets no attribute; name at least one", d.ID)
	}
	if err := d.Attributes.Validate(); err != nil {
		return v.invalid("UpsertAttributes(%q): %v", d.ID, err)
	}
	if n := len(s.Attributes.Merge(d.Attributes)); n > event.MaxAttributes {
		return v.invalid("UpsertAttributes(%q) would give the run %d search attributes; the limit is %d", d.ID, n, event.MaxAttributes)
	}
	got := &event.AttributesUpserted{UpsertID: d.ID, Attributes: maps.Clone(d.Attributes)}
	ok, err := v.recorded(kindUpsert, d.ID)
	if err != nil {
		return Verdict{}, err
	}
	if !ok {
		return Verdict{Events: []event.Payload{got}}, nil
	}
	u := s.Upserts[d.ID]
	if err := compareUpsert(s.RunID, &event.AttributesUpserted{UpsertID: u.ID, Attributes: u.Attributes}, u.Seq, got); err != nil {
		return Verdict{}, err
	}
	return v.settled("upsert %q was already recorded at seq %d, yet the workflow issued it again; check ctx.Upserted(%q) first, and give a new upsert a new ID", d.ID, u.Seq, d.ID)
}

// compareUpsert compares a recorded upsert with the one the code now gives, attribute by
// attribute in name order: the first attribute whose value differs, or that only one of them
// sets, is a mismatch of field "attributes.<name>".
func compareUpsert(runID string, rec *event.AttributesUpserted, seq uint64, got *event.AttributesUpserted) error {
	names := slices.Sorted(maps.Keys(rec.Attributes.Merge(got.Attributes)))
	for _, name := range names {
		r, rok := rec.Attributes[name]
		g, gok := got.Attributes[name]
		if rok && gok && r.Equal(g) {
			continue
		}
		return mismatch(runID, kindUpsert, rec.UpsertID, "attributes."+name, attrForm(r, rok), attrForm(g, gok), seq)
	}
	return nil
}

// attrForm renders an attribute value for a mismatch: its type and JSON value, or "not set".
func attrForm(v event.AttributeValue, ok bool) plain {
	if !ok {
		return "not set"
	}
	return plain(fmt.Sprintf("%s %s", v.Type, v.Value))
}

// CheckDeclared reports an *InvalidDecisionError when an UpsertAttributes decision sets an
// attribute that decls does not declare, or a value of another type than declared. Decide calls
// it with the declarations of the code deciding; other decisions pass.
func CheckDeclared(runID string, dec Decision, decls []event.AttributeDecl) error {
	u, ok := dec.(UpsertAttributes)
	if !ok {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(u.Attributes)) {
		val := u.Attributes[name]
		i := slices.IndexFunc(decls, func(d event.AttributeDecl) bool { return d.Name == name })
		if i < 0 {
			return &InvalidDecisionError{RunID: runID, Code: CodeInvalidDecision, Detail: fmt.Sprintf(
				"UpsertAttributes(%q) sets search attribute %q, which the workflow does not declare (declared: %s); declare it with flow.WithSearchAttributes when registering the workflow",
				u.ID, name, declNames(decls))}
		}
		if decls[i].Type != val.Type {
			return &InvalidDecisionError{RunID: runID, Code: CodeInvalidDecision, Detail: fmt.Sprintf(
				"UpsertAttributes(%q) sets search attribute %q to a %s value, but it is declared %s; give it a %s value",
				u.ID, name, val.Type, decls[i].Type, decls[i].Type)}
		}
	}
	return nil
}

// declNames lists declarations as "name (type)", or "none".
func declNames(decls []event.AttributeDecl) string {
	if len(decls) == 0 {
		return "none"
	}
	parts := make([]string, len(decls))
	for i, d := range decls {
		parts[i] = fmt.Sprintf("%s (%s)", d.Name, d.Type)
	}
	return strings.Join(parts, ", ")
}

// TypeAttributes converts raw start attributes (JSON values by name, as a start request carries
// them) to typed values by the declarations decls: an undeclared name or a value that is not of
// its declared type is an error wrapping ErrInvalidInput that says what to send.
func TypeAttributes(raw map[string][]byte, decls []event.AttributeDecl) (event.Attributes, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make(event.Attributes, len(raw))
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		i := slices.IndexFunc(decls, func(d event.AttributeDecl) bool { return d.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: search attribute %q is not declared by the workflow (declared: %s); declare it with flow.WithSearchAttributes, or leave it out",
				ErrInvalidInput, name, declNames(decls))
		}
		v, err := event.CoerceAttribute(decls[i].Type, raw[name])
		if err != nil {
			return nil, fmt.Errorf("%w: search attribute %q: %w", ErrInvalidInput, name, err)
		}
		out[name] = v
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return out, nil
}

// Equal reports whether two summaries are the same in every field, attributes included.
func (s Summary) Equal(o Summary) bool {
	return s.RunID == o.RunID && s.Definition == o.Definition && s.BuildID == o.BuildID && s.Queue == o.Queue &&
		s.Status == o.Status && s.Seq == o.Seq && s.StartedAt.Equal(o.StartedAt) && s.UpdatedAt.Equal(o.UpdatedAt) &&
		s.StartedAt.Location() == o.StartedAt.Location() && s.UpdatedAt.Location() == o.UpdatedAt.Location() &&
		s.Parent == o.Parent && s.Detail == o.Detail && s.Parked == o.Parked && s.Damaged == o.Damaged &&
		s.Attributes.Equal(o.Attributes) && s.ResetFrom == o.ResetFrom && s.ResetTo == o.ResetTo && s.ContinuedAs == o.ContinuedAs && (s.Deleted == nil) == (o.Deleted == nil) && (s.Deleted == nil || s.Deleted.equal(*o.Deleted))
}

func (d Deletion) equal(o Deletion) bool {
	return d.At.Equal(o.At) && d.Reason == o.Reason && d.Archive == o.Archive && d.Purged == o.Purged && d.Msgs == o.Msgs
}
