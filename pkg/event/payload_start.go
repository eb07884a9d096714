package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ConflictPolicy says what a start does when the run ID it names belongs to a run that is still
// active (docs/start-policies.md).
type ConflictPolicy string

const (
	// ConflictFail refuses the start (ErrRunExists), unless it repeats the existing run's
	// start (same definition, input and queue), which returns the existing run. The default.
	ConflictFail ConflictPolicy = "fail"
	// ConflictUseExisting returns the existing run, whatever its input.
	ConflictUseExisting ConflictPolicy = "use_existing"
	// ConflictTerminateExisting terminates the existing run (run.failed, cause operator) and
	// starts a new one in its place, linked to it (StartPolicy.Replaces).
	ConflictTerminateExisting ConflictPolicy = "terminate_existing"
)

// Valid reports whether p is a known policy; "" is valid and means ConflictFail.
func (p ConflictPolicy) Valid() bool {
	return slices.Contains([]ConflictPolicy{"", ConflictFail, ConflictUseExisting, ConflictTerminateExisting}, p)
}

// ReusePolicy says whether a start may reuse the run ID of a run that has ended.
type ReusePolicy string

const (
	// ReuseRefuse refuses the start (ErrRunExists), unless it repeats the ended run's start,
	// which returns the ended run. The default.
	ReuseRefuse ReusePolicy = "refuse"
	// ReuseAllow starts a new run for the ID, whatever the last one's outcome.
	ReuseAllow ReusePolicy = "allow"
	// ReuseAllowFailedOnly starts a new run only if the last one did not complete: it failed
	// (terminated runs fail) or was cancelled. Temporal's AllowDuplicateFailedOnly.
	ReuseAllowFailedOnly ReusePolicy = "allow_failed_only"
)

// Valid reports whether p is a known policy; "" is valid and means ReuseRefuse.
func (p ReusePolicy) Valid() bool {
	return slices.Contains([]ReusePolicy{"", ReuseRefuse, ReuseAllow, ReuseAllowFailedOnly}, p)
}

// Debounce collapses the starts that share Key within a quiet period of Period into one run,
// started once Period has passed since the latest of them, with the latest one's input.
type Debounce struct {
	// Key groups the starts collapsed into one run; Period is the quiet period.
	Key    string   `json:"key"`
	Period Duration `json:"period"`
}

// StartPolicy records, in run.started, the policies a start asked for and what they did.
type StartPolicy struct {
	// OnConflict and Reuse are the policies the start asked for ("" for the defaults).
	OnConflict ConflictPolicy `json:"on_conflict,omitempty"`
	Reuse      ReusePolicy    `json:"reuse,omitempty"`
	// RunID is the ID the caller asked for, when this run has another (a reuse of the ID).
	RunID string `json:"run_id,omitempty"`
	// Previous is the latest run of the ID before this one, which this run follows: it ended
	// (a reuse), or it was active and this run replaces it (Replaces is set).
	Previous string `json:"previous,omitempty"`
	// Replaces is set when this run replaces Previous, an active run that the start terminates
	// (ConflictTerminateExisting). Whoever applies this commit terminates Previous if it is
	// still active.
	Replaces bool `json:"replaces,omitempty"`
	// Delay is the start delay asked for (the run's NotBefore is the start's time plus Delay).
	Delay Duration `json:"delay,omitempty"`
	// DedupKey and DedupWindow are the start's deduplication key and window.
	DedupKey    string   `json:"dedup_key,omitempty"`
	DedupWindow Duration `json:"dedup_window,omitempty"`
	// Debounce is the start's debounce key and quiet period.
	Debounce *Debounce `json:"debounce,omitempty"`
	// RequestID identifies the start request: a retry of the request that started this run
	// (the same RequestID) returns the run instead of applying the policies again.
	RequestID string `json:"request_id,omitempty"`
}

func (p *StartPolicy) validate() error {
	if p == nil {
		return nil
	}
	var errs []error
	if !p.OnConflict.Valid() {
		errs = append(errs, fieldError("start_policy.on_conflict", fmt.Sprintf("is %q, not one of fail, use_existing, terminate_existing", p.OnConflict)))
	}
	if !p.Reuse.Valid() {
		errs = append(errs, fieldError("start_policy.reuse", fmt.Sprintf("is %q, not one of refuse, allow, allow_failed_only", p.Reuse)))
	}
	if p.Replaces && p.Previous == "" {
		errs = append(errs, fieldError("start_policy.previous", "is required when replaces is set"))
	}
	if p.Debounce != nil {
		errs = append(errs, required("start_policy.debounce.key", p.Debounce.Key))
	}
	return errors.Join(errs...)
}

// RunDelayFired ends the start delay of a run: its NotBefore (run.started's, or the latest
// run.debounced's) has passed, and the first decision is due.
type RunDelayFired struct {
	// NotBefore is the time the delay ran to, as the event that set it recorded it.
	NotBefore time.Time `json:"not_before"`
}

// RunDebounced records a start collapsed into this run, which is still delayed: the run's input
// becomes Input and its NotBefore moves to NotBefore.
type RunDebounced struct {
	// Input is the collapsed start's input; NotBefore the run's new start time.
	Input     json.RawMessage `json:"input"`
	NotBefore time.Time       `json:"not_before"`
	// TraceParent is the W3C traceparent of the start that was collapsed, when there was one.
	TraceParent string `json:"traceparent,omitempty"`
	// Replaces is the sequence of the event (run.started or an earlier run.debounced) whose
	// start timer this one replaces: that timer is moot. Zero in events recorded before it
	// existed.
	Replaces uint64 `json:"replaces,omitempty"`
}

func (*RunDelayFired) EventType() Type { return TypeRunDelayFired }
func (*RunDebounced) EventType() Type  { return TypeRunDebounced }

func (*RunDelayFired) PayloadFields() []*json.RawMessage  { return nil }
func (p *RunDebounced) PayloadFields() []*json.RawMessage { return []*json.RawMessage{&p.Input} }

func (p *RunDelayFired) Summarize() string {
	return "start delay fired (not before " + p.NotBefore.Format(summaryClock) + ")"
}

func (p *RunDebounced) Summarize() string {
	return fmt.Sprintf("start debounced: input %s, delayed until %s", inline(p.Input), p.NotBefore.Format(summaryDate))
}

// startPolicySummary renders what run.started's start policies did, and its delay, for its
// summary ("" for a plain start).
func (p *RunStarted) startPolicySummary() string {
	s := ""
	if !p.NotBefore.IsZero() {
		s += ", delayed until " + p.NotBefore.Format(summaryDate)
	}
	sp := p.StartPolicy
	if sp == nil {
		return s
	}
	switch {
	case sp.Replaces:
		s += fmt.Sprintf(", replaces run %s (%s)", sp.Previous, ConflictTerminateExisting)
	case sp.Previous != "":
		s += fmt.Sprintf(", reuses ID %s after run %s (reuse %s)", sp.RunID, sp.Previous, sp.Reuse)
	}
	if sp.DedupKey != "" {
		s += fmt.Sprintf(", dedup key %q for %s", sp.DedupKey, time.Duration(sp.DedupWindow))
	}
	if d := sp.Debounce; d != nil {
		s += fmt.Sprintf(", debounce key %q, quiet %s", d.Key, time.Duration(d.Period))
	}
	return s
}

// Validate implements Payload.
func (p *RunDelayFired) Validate() error {
	if p.NotBefore.IsZero() {
		return fieldError("not_before", "is required")
	}
	return nil
}

// Validate implements Payload.
func (p *RunDebounced) Validate() error {
	err := requiredJSON("input", p.Input)
	if p.NotBefore.IsZero() {
		err = errors.Join(err, fieldError("not_before", "is required"))
	}
	return err
}

// ReuseRunID derives the run ID of the n-th run (n >= 1) that reuses caller run ID id after the
// run first started under it: "<id>=_<n>". Decision IDs start with a letter and generations are
// numbers, so the '_' after '=' marks a reuse and cannot collide with a child or a continuation.
func ReuseRunID(id string, n int) string { return fmt.Sprintf("%s=_%d", id, n) }

// ReuseFamily returns the caller run ID that run runID belongs to and the number of its reuse:
// X, X=<gen> (a continuation), X=_n and X=_n=<gen> belong to X, with n 0 for X's own chain.
// ok is false for any other run ID (a child's).
func ReuseFamily(runID string) (id string, n int, ok bool) {
	id, rest, found := strings.Cut(runID, "=")
	if !found {
		return runID, 0, true
	}
	if num, isReuse := strings.CutPrefix(rest, "_"); isReuse {
		num, gen, _ := strings.Cut(num, "=")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || strconv.Itoa(n) != num {
			return "", 0, false
		}
		if _, err := strconv.Atoi(gen); gen != "" && err != nil {
			return "", 0, false
		}
		return id, n, true
	}
	if _, err := strconv.Atoi(rest); err == nil {
		return id, 0, true
	}
	return "", 0, false
}
