package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// A comparison of a recorded identity with the one the code now gives. Each compare function
// returns nil or the *NonDeterminismError for the first differing field, in the order it lists
// the fields, so a decision that differs in several fields always reports the same one.

func mismatch(runID, kind, id, field string, recorded, got any, seq uint64) *NonDeterminismError {
	// A payload recorded by reference is compared by hash: show the new value's reference too
	// (and the other way round), not its first bytes.
	r, rok := recorded.(json.RawMessage)
	g, gok := got.(json.RawMessage)
	if rok && gok {
		switch {
		case payload.IsRef(r) && len(g) > 0 && !payload.IsRef(g):
			got = payload.RefOf(g).JSON()
		case payload.IsRef(g) && len(r) > 0 && !payload.IsRef(r):
			recorded = payload.RefOf(r).JSON()
		}
	}
	return &NonDeterminismError{RunID: runID, Kind: kind, ID: id, Field: field,
		Recorded: render(recorded), New: render(got), Seq: seq}
}

func compareStep(runID string, rec event.StepSpec, seq uint64, got event.StepSpec) error {
	switch {
	case rec.Name != got.Name:
		return mismatch(runID, kindStep, rec.ID, "name", rec.Name, got.Name, seq)
	case !JSONEqual(rec.Input, got.Input):
		return mismatch(runID, kindStep, rec.ID, "input", rec.Input, got.Input, seq)
	case !rec.Retry.Equal(got.Retry):
		return mismatch(runID, kindStep, rec.ID, "retry", rec.Retry.Normalize(), got.Retry.Normalize(), seq)
	case !rec.Timeouts.Equal(got.Timeouts):
		return mismatch(runID, kindStep, rec.ID, "timeouts", timeoutsForm(rec.Timeouts), timeoutsForm(got.Timeouts), seq)
	}
	return nil
}

func compareWait(runID string, rec *event.WaitScheduled, seq uint64, got *event.WaitScheduled) error {
	switch {
	case got.Duration != 0 || rec.Duration != 0:
		// Sleep is compared by its duration: its deadline depends on when it was first issued.
		if rec.Duration != got.Duration {
			return mismatch(runID, kindWait, rec.WaitID, "duration", waitForm(rec), waitForm(got), seq)
		}
	case !rec.Deadline.Equal(got.Deadline):
		return mismatch(runID, kindWait, rec.WaitID, "deadline", rec.Deadline, got.Deadline, seq)
	}
	return nil
}

func waitForm(w *event.WaitScheduled) plain {
	if w.Duration == 0 {
		return plain("WaitUntil(" + w.Deadline.UTC().Format(time.RFC3339Nano) + ")")
	}
	return plain("Sleep(" + time.Duration(w.Duration).String() + ")")
}

// plain is rendered as is, without quotes.
type plain string

func (p plain) String() string { return string(p) }

func compareSignalWait(runID string, rec *event.SignalAwaited, seq uint64, got *event.SignalAwaited) error {
	if rec.Name != got.Name {
		return mismatch(runID, kindSignalWait, rec.WaitID, "signal_name", rec.Name, got.Name, seq)
	}
	return nil
}

func compareHook(runID string, rec *event.HookCreated, seq uint64, got *event.HookCreated) error {
	switch {
	case rec.Token != got.Token:
		return mismatch(runID, kindHook, rec.HookID, "token", rec.Token, got.Token, seq)
	case !JSONEqual(rec.Metadata, got.Metadata):
		return mismatch(runID, kindHook, rec.HookID, "metadata", rec.Metadata, got.Metadata, seq)
	}
	return nil
}

func compareChild(runID string, rec event.ChildSpec, seq uint64, got event.ChildSpec) error {
	switch {
	case rec.Definition != got.Definition:
		return mismatch(runID, kindChild, rec.ChildID, "definition", rec.Definition, got.Definition, seq)
	case !JSONEqual(rec.Input, got.Input):
		return mismatch(runID, kindChild, rec.ChildID, "input", rec.Input, got.Input, seq)
	case rec.CancelPolicy != got.CancelPolicy:
		return mismatch(runID, kindChild, rec.ChildID, "cancel_policy", rec.CancelPolicy, got.CancelPolicy, seq)
	case (rec.Retry == nil) != (got.Retry == nil) || rec.Retry != nil && !rec.Retry.Equal(*got.Retry):
		return mismatch(runID, kindChild, rec.ChildID, "retry", retryForm(rec.Retry), retryForm(got.Retry), seq)
	}
	return nil
}

// retryForm renders a child's optional retry policy.
func retryForm(p *event.RetryPolicy) any {
	if p == nil {
		return plain("none")
	}
	return p.Normalize()
}

// sameRetry reports whether two normalized policies are equal: RetryPolicy.Equal without
// normalizing them again.
func sameRetry(a, b *event.RetryPolicy) bool {
	return a.MaxAttempts == b.MaxAttempts && a.InitialInterval == b.InitialInterval &&
		a.BackoffCoefficient == b.BackoffCoefficient && a.MaxInterval == b.MaxInterval &&
		slices.Equal(a.NonRetryable, b.NonRetryable) && a.OnExhaustion == b.OnExhaustion
}

// defaultRetry is the zero policy normalized: every default.
var defaultRetry = event.RetryPolicy{}.Normalize()

// normalizesTo reports whether *p, normalized, equals the normalized policy *norm. It
// normalizes *p only when it is neither *norm itself nor the zero policy (no policy given), the
// usual cases.
func normalizesTo(p, norm *event.RetryPolicy) bool {
	if p.MaxAttempts == 0 && p.InitialInterval == 0 && p.BackoffCoefficient == 0 && p.MaxInterval == 0 &&
		len(p.NonRetryable) == 0 && p.OnExhaustion == "" {
		return sameRetry(&defaultRetry, norm)
	}
	if sameRetry(p, norm) {
		return true
	}
	n := p.Normalize()
	return sameRetry(&n, norm)
}

// compareMembers checks that a batch lists the same IDs in the same order as recorded.
func compareMembers(runID, kind string, rec []string, seq uint64, got []string) error {
	if !slices.Equal(rec, got) {
		return mismatch(runID, kind, rec[0], "members", rec, got, seq)
	}
	return nil
}

// compareKeyed compares a replayed decision (or batch member) with the recorded one at seq:
// its ID (field idField), then the rest with compare.
func compareKeyed[T any](runID, kind, idField string, seq uint64, rec, got T, id func(T) string,
	compare func(runID string, rec T, seq uint64, got T) error) error {
	if id(rec) != id(got) {
		return mismatch(runID, kind, id(rec), idField, id(rec), id(got), seq)
	}
	return compare(runID, rec, seq, got)
}

// compareBatch compares a replayed batch with the recorded one at seq: two batches of one as
// one decision (compareKeyed); else the members' IDs and order (compareMembers), then each
// member with compare.
func compareBatch[T any](runID, kind, idField string, seq uint64, rec, got []T, id func(T) string,
	compare func(runID string, rec T, seq uint64, got T) error) error {
	if len(rec) == 1 && len(got) == 1 {
		return compareKeyed(runID, kind, idField, seq, rec[0], got[0], id, compare)
	}
	if err := compareMembers(runID, kind, idsOf(rec, id), seq, idsOf(got, id)); err != nil {
		return err
	}
	for i := range rec {
		if err := compare(runID, rec[i], seq, got[i]); err != nil {
			return err
		}
	}
	return nil
}

// JSONEqual compares two JSON documents: byte-equal after compaction, or equal as values.
// Numbers compare exactly, by their decimal value: 1, 1.0 and 10e-1 are equal, while two
// integers beyond float64's 53-bit precision that differ are not.
//
// Either may be a payload reference (internal/payload): a reference equals another with the
// same hash, and inline bytes whose hash it is.
func JSONEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if eq, ok := payload.Equal(a, b); ok {
		return eq
	}
	if len(a) == 0 || len(b) == 0 {
		return isNullJSON(a) && isNullJSON(b)
	}
	va, erra := decodeExact(a)
	vb, errb := decodeExact(b)
	if erra != nil || errb != nil {
		return false
	}
	return jsonValueEqual(va, vb)
}

func decodeExact(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// jsonValueEqual compares values decoded with UseNumber.
func jsonValueEqual(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		return a == b || canonicalNumber(string(a)) == canonicalNumber(string(b))
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !jsonValueEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !jsonValueEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func isNullJSON(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}

const renderLimit = 200

// render formats a compared value for an error message, truncated to renderLimit bytes.
func render(v any) string {
	var s string
	switch v := v.(type) {
	case json.RawMessage:
		if len(v) == 0 {
			s = "none"
		} else {
			s = string(v)
		}
	case string:
		s = fmt.Sprintf("%q", v)
	case time.Time:
		s = v.UTC().Format(time.RFC3339Nano)
	case fmt.Stringer:
		s = v.String()
	default:
		b, err := json.Marshal(v)
		if err != nil {
			s = fmt.Sprint(v)
		} else {
			s = string(b)
		}
	}
	if len(s) > renderLimit {
		s = s[:renderLimit] + "…"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// canonicalNumber rewrites a JSON number as sign, significant digits and a decimal exponent
// ("-12e3" for -12000 and -1.2e4), so that equal values compare equal as strings without
// converting to a float (which loses precision) or expanding the exponent (which a hostile
// "1e999999999" would make huge). An exponent out of int64 range keeps the number as written.
func canonicalNumber(n string) string {
	sign := ""
	if strings.HasPrefix(n, "-") {
		sign, n = "-", n[1:]
	}
	mant, expText, _ := strings.Cut(strings.ToLower(n), "e")
	exp := int64(0)
	if expText != "" {
		var err error
		if exp, err = strconv.ParseInt(expText, 10, 64); err != nil {
			return sign + n
		}
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	if trimmed == "" {
		return "0"
	}
	return sign + trimmed + "e" + strconv.FormatInt(exp, 10)
}
