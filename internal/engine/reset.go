package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/wait"
	"github.com/flowrun/flow/pkg/event"
)

// Reset and rerun (docs/reset.md) start a new run from a prefix of an old run's history. The
// writes, in order:
//
//  1. run.reset in the old run, appended at the sequence the reset was planned on (optimistic
//     concurrency), naming the new run (a run ID derived from the request, ResetRunID), the
//     point and the mode, with a rerun's new input, and the old run's termination in the same
//     commit if it was active. It is the reset's commit point: two resets of one run, or a reset
//     and a deletion (retention), are ordered by it, and a repeat of the request finds it.
//  2. the new run, appended create-only at sequence 0: run.started with reset_from, the old
//     run's events 2..point and the reapplied inputs, in one commit. It follows from 1
//     (core.PlanRecorded of the old run's history before run.reset): the history service
//     creates it when it applies the old run's commit (ApplyCommit), an input forwarded to the
//     new run creates it first, and the resetter creates it at once as a fast path. Whoever
//     comes first writes it; the others find it.
//  3. the routes of the hook tokens the new run copied, taken over from the old run, which has
//     ended by then. They follow from 2: the history service, FLOW_HOOKS's one writer, writes
//     them when it applies the new run's first commit (ApplyCommit); no other writer of 2 does.
//     Until then a delivery to a copied token reaches the old run's route, and DeliverHook
//     follows the reset to the new run.
//
// A crash between any two writes delays the next and never loses it.

// ResetParams asks for a reset or a rerun of run RunID.
type ResetParams struct {
	RunID string
	// Mode chooses the point: event.ResetToSeq (Seq), event.ResetToStep (StepID),
	// event.ResetToLastDecision, event.ResetRerun (StepID, and Input).
	Mode   event.ResetMode
	Seq    uint64
	StepID string
	// Input, for a rerun, replaces the run's input in the new run.started; nil keeps it.
	Input json.RawMessage
	// DropInputs drops the signals, hook deliveries and updates the old run recorded after the
	// point instead of reapplying them.
	DropInputs bool
	Reason     string
	// RequestID identifies the request: a repeat with it returns the same new run. Without it,
	// the new run is identified by the old run, the point, the mode and the options.
	RequestID string
}

// ErrResetConflict is wrapped by the error of a reset whose request ID was used for another
// reset of the run.
var ErrResetConflict = errors.New("flow: reset request ID already used")

// ErrResetBusy is wrapped by the error of a reset that waited too long for another reset of a
// run of the same workflow to finish (see lockResets): retry it.
var ErrResetBusy = errors.New("flow: another reset of the workflow is under way")

// ActiveResetError refuses a reset of a run that has ended while the run its workflow goes on in
// (an earlier reset's new run, a continuation, a later run that reuses its ID, followed through
// each other) is still active: a reset never leaves two live runs of one workflow. It matches
// ErrRunExists.
type ActiveResetError struct {
	// RunID is the run asked to be reset; Head the active run of its chain.
	RunID, Head string
}

func (e *ActiveResetError) Error() string {
	return fmt.Sprintf("flow: run %q has ended and its workflow goes on in run %q (a reset, a continuation or a later run of its ID), "+
		"which is still active: a reset never leaves two live runs of one workflow; reset %q instead, or end it first (`flow terminate %s`)",
		e.RunID, e.Head, e.Head, e.Head)
}

// Is matches ErrRunExists.
func (e *ActiveResetError) Is(target error) bool { return target == ErrRunExists }

// SupersededResetError refuses a reset of an ended run that a later run of its caller ID
// superseded (the ID's first run once ID=_1 exists, ID=_1 once ID=_2 does, and the runs each of
// them continued or was reset as): only the runs of an ID's latest run can be reset, so that the
// workflow's live run, if any, is always the one a start under the ID and an input to it find.
// It matches ErrRunExists.
type SupersededResetError struct {
	// RunID is the run asked to be reset; Latest the latest run of its ID.
	RunID, Latest string
}

func (e *SupersededResetError) Error() string {
	return fmt.Sprintf("flow: run %q was superseded by run %q, a later run of its ID: only the runs of an ID's latest run can be reset; "+
		"reset %q (or the run it continued or was reset as) instead, or start a new run of the ID", e.RunID, e.Latest, e.Latest)
}

// Is matches ErrRunExists.
func (e *SupersededResetError) Is(target error) bool { return target == ErrRunExists }

// ResetRunID derives the run ID of a reset of run oldRun identified by key: the old run's ID
// without the suffix of an earlier reset, then "=_reset-" and 16 hex digits of SHA-256 over the
// old run and key. The '_' keeps it apart from child IDs (which start with a letter) and from
// reuses of a caller ID ("=_<n>").
func ResetRunID(oldRun, key string) string {
	base := oldRun
	if i := strings.LastIndex(oldRun, resetSep); i >= 0 {
		base = oldRun[:i]
	}
	h := sha256.Sum256([]byte(oldRun + "\x00" + key))
	return base + resetSep + hex.EncodeToString(h[:8])
}

const resetSep = "=_reset-"

// ResetFamily returns the run ID that run id's resets are named after (ResetRunID strips the
// earlier resets' suffixes), and whether id is the new run of a reset at all.
func ResetFamily(id string) (string, bool) {
	i := strings.LastIndex(id, resetSep)
	if i < 0 {
		return "", false
	}
	return id[:i], true
}

// resetKey identifies a reset for ResetRunID: its request ID, or what it asks for.
func resetKey(p ResetParams, point uint64) string {
	if p.RequestID != "" {
		return "request\x00" + p.RequestID
	}
	in := ""
	if len(p.Input) > 0 {
		c, err := core.CanonicalJSON(p.Input)
		if err == nil {
			in = string(c)
		}
	}
	return fmt.Sprintf("point\x00%d\x00%s\x00%s\x00%t\x00%s", point, p.Mode, p.StepID, p.DropInputs, in)
}

// maxResetRounds bounds the rounds of a reset that keeps losing the race to other writers of
// the old run.
const maxResetRounds = 16

// Reset records in run p.RunID a reset as p asks (see ResetParams), ending the run if it is
// active, starts the new run it names, and returns the new run's ID. A repeat of the same reset
// (the same RequestID, or without one the same point, mode and options) returns the same run.
// Errors wrap core.ErrNotFound, core.ErrInvalidInput (a *core.ResetPointError for a point that
// is not a reset point), ErrResetConflict, ErrResetBusy (another reset of a run of the same
// workflow held it up: lockResets), or ErrRunExists (an *ActiveResetError, or a
// *SupersededResetError for a run a later run of its ID superseded).
func (e *Engine) Reset(ctx context.Context, p ResetParams) (string, error) {
	if err := event.ValidateDerivedRunID(p.RunID); err != nil {
		return "", fmt.Errorf("%w: %w", core.ErrInvalidInput, err)
	}
	unlock, err := e.lockResets(ctx, p.RunID)
	if err != nil {
		return "", err
	}
	defer unlock()
	atLeast := uint64(1)
	for range maxResetRounds {
		hist, err := e.store.LoadAtLeast(ctx, p.RunID, 0, atLeast)
		if err != nil {
			return "", fmt.Errorf("loading run %q: %w", p.RunID, err)
		}
		plan, err := core.PlanReset(p.RunID, hist, core.ResetRequest{Mode: p.Mode, Seq: p.Seq, StepID: p.StepID, Input: p.Input,
			DropInputs: p.DropInputs, Reason: p.Reason, RequestID: p.RequestID})
		if err != nil {
			return "", err
		}
		newID := ResetRunID(p.RunID, resetKey(p, plan.Point))
		if err := event.ValidateDerivedRunID(newID); err != nil {
			return "", fmt.Errorf("%w: the reset's run ID: %w", core.ErrInvalidInput, err)
		}
		old := plan.Old
		if link, ok := old.ResetOf(newID); ok {
			// A repeat: the reset is recorded; make sure its run exists.
			if err := sameReset(p, plan, link, newID); err != nil {
				return "", err
			}
			if err := e.startReset(ctx, p.RunID, newID); err != nil {
				return "", err
			}
			return newID, nil
		}
		if old.Terminal() {
			if latest, later, err := e.laterReuse(ctx, withoutResets(p.RunID)); err != nil {
				return "", err
			} else if later {
				return "", &SupersededResetError{RunID: p.RunID, Latest: latest}
			}
		}
		if head, live, err := e.chainHead(ctx, old); err != nil {
			return "", err
		} else if live {
			return "", &ActiveResetError{RunID: p.RunID, Head: head}
		}
		events, err := core.RecordReset(old, newID, plan)
		if err != nil {
			return "", err
		}
		if err := e.offload(ctx, events); err != nil { // a rerun's large input
			return "", fmt.Errorf("recording the reset in run %q: %w", p.RunID, err)
		}
		err = e.commit(ctx, old, events)
		var ce *store.ConflictError
		if errors.As(err, &ce) {
			atLeast = max(atLeast, ce.Actual) // another writer came first: plan again on what it wrote
			continue
		}
		if err != nil {
			return "", fmt.Errorf("recording the reset in run %q: %w", p.RunID, err)
		}
		e.logger.InfoContext(ctx, "run reset", slog.String("run_id", p.RunID), slog.String("new_run_id", newID),
			slog.Uint64("point", plan.Point), slog.String("mode", string(p.Mode)))
		if err := e.faults.Hit(fault.AfterResetRecordBeforeStart); err != nil {
			return newID, nil // the history service starts the new run when it applies the record
		}
		if err := e.startReset(ctx, p.RunID, newID); err != nil {
			e.logger.WarnContext(ctx, "the reset's new run is not started yet; the history service starts it", slog.String("run_id", p.RunID),
				slog.String("new_run_id", newID), slog.String("error", err.Error()))
		}
		return newID, nil
	}
	return "", fmt.Errorf("run %q changed %d times while a reset was recorded in it; retry", p.RunID, maxResetRounds)
}

// sameReset checks that the reset link of the old run records is the one p asks for (a repeat).
func sameReset(p ResetParams, plan *core.ResetPlan, link core.ResetLink, newID string) error {
	if p.RequestID == "" {
		return nil // the new run's ID is derived from the point, mode and options: they agree
	}
	want := plan.Record
	if link.Point != want.Seq || link.Mode != want.Mode || link.StepID != want.StepID || link.DropInputs != want.DropInputs ||
		link.InputReplaced != (len(want.Input) > 0) {
		return fmt.Errorf("%w: request %q reset run %q to seq %d (%s) as run %q; this request asks for seq %d (%s): use a new request ID",
			ErrResetConflict, p.RequestID, p.RunID, link.Point, link.Mode, newID, want.Seq, want.Mode)
	}
	return nil
}

// chainHead returns the run that the family of ended run s's ID goes on in, and whether it is
// still active: the latest run of the caller ID s belongs to (workflowOf), followed from that
// ID's first run through continuations, resets (writing a reset's new run that is recorded and
// not written yet) and later runs that reuse the ID. An active s has no such run: live is false.
func (e *Engine) chainHead(ctx context.Context, s *core.Snapshot) (head string, live bool, err error) {
	if !s.Terminal() {
		return "", false, nil
	}
	cur := workflowOf(s.RunID)
	for range maxGenerations {
		last, err := e.lastGeneration(ctx, cur)
		switch {
		case errors.Is(err, store.ErrDamaged):
			return cur, true, nil // quarantined: an operator releases or terminates it first
		case err != nil:
			return "", false, fmt.Errorf("following the runs of run %q: %w", s.RunID, err)
		case !last.Terminal():
			return last.RunID, last.RunID != s.RunID, nil
		}
		next, ok, err := e.laterReuse(ctx, cur)
		if err != nil {
			return "", false, err
		}
		if !ok {
			return last.RunID, false, nil
		}
		cur = next
	}
	return "", false, fmt.Errorf("the runs of run %q go on more than %d times", s.RunID, maxGenerations)
}

// startReset writes the new run newID that old run oldID's run.reset names, unless it exists.
// It is step 2 of a reset, done by whoever comes first: idempotent. It writes no hook route: the
// history service routes the copied tokens as the consequence of the new run's first commit
// (applyReset).
func (e *Engine) startReset(ctx context.Context, oldID, newID string) error {
	hist, err := e.store.LoadAtLeast(ctx, oldID, 0, 1)
	if err != nil {
		return fmt.Errorf("loading run %q: %w", oldID, err)
	}
	var rr *event.RunReset
	var at uint64
	for _, ev := range hist {
		if r, ok := ev.Payload.(*event.RunReset); ok && r.NewRunID == newID {
			rr, at = r, ev.Seq
		}
	}
	if rr == nil {
		return fmt.Errorf("%w: run %q records no run.reset naming run %q", core.ErrNotFound, oldID, newID)
	}
	plan, err := core.PlanRecorded(oldID, hist, rr, at)
	if err != nil {
		return err
	}
	events := plan.Events(hist[0].Time, hist[at-1].Time)
	last, err := e.store.Append(ctx, newID, 0, events...)
	countAppend(ctx, err)
	switch {
	case errors.Is(err, store.ErrConflict):
		if err := e.isResetOf(ctx, newID, oldID); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("appending the reset run %q: %w", newID, err)
	default:
		e.resume(ctx, Task{RunID: newID, Queue: plan.Started.Queue, Build: plan.Started.Spec.BuildID, Seq: last, TraceParent: plan.Started.TraceParent})
	}
	return nil
}

// isResetOf checks that run newID, which exists, is a reset of run oldID.
func (e *Engine) isResetOf(ctx context.Context, newID, oldID string) error {
	hist, err := e.store.LoadAtLeast(ctx, newID, 0, 1)
	if err != nil {
		return fmt.Errorf("loading run %q: %w", newID, err)
	}
	if len(hist) == 0 {
		return fmt.Errorf("run %q is taken but holds no event; retry", newID)
	}
	if st, ok := hist[0].Payload.(*event.RunStarted); !ok || st.ResetFrom == nil || st.ResetFrom.RunID != oldID {
		return fmt.Errorf("%w: run %q exists and is not a reset of run %q", ErrRunExists, newID, oldID)
	}
	return nil
}

// routeResetHooks routes to reset run newID the tokens of the hooks it copied and still waits
// on, taken over from the old run, which has ended. Idempotent: a token is taken over only from
// a run that ended. Only ApplyCommit calls it: the history service's host writes FLOW_HOOKS.
func (e *Engine) routeResetHooks(ctx context.Context, newID string) error {
	ns, err := e.snapshot(ctx, newID, 1)
	if err != nil {
		return fmt.Errorf("loading the reset run %q: %w", newID, err)
	}
	if ns.Terminal() {
		return nil
	}
	for _, h := range ns.Hooks {
		if h.Received {
			continue
		}
		if err := e.registerHook(ctx, h.Token, newID, h.ID); err != nil {
			return fmt.Errorf("routing the token of hook %q to the reset run %q: %w", h.ID, newID, err)
		}
	}
	return nil
}

// applyReset carries out what a commit of run s.RunID implies for resets (called by
// ApplyCommit): an old run's run.reset starts the new run it names (startReset), and a reset
// run's first commit routes its copied hooks.
func (e *Engine) applyReset(ctx context.Context, s *core.Snapshot, commit []event.Envelope) error {
	for _, ev := range commit {
		switch p := ev.Payload.(type) {
		case *event.RunStarted:
			if p.ResetFrom != nil && !s.Terminal() {
				if err := e.routeResetHooks(ctx, s.RunID); err != nil && !errors.Is(err, core.ErrNotFound) {
					return err
				}
			}
		case *event.RunReset:
			if err := e.startReset(ctx, s.RunID, p.NewRunID); err != nil {
				return e.resetGone(ctx, s.RunID, err)
			}
		}
	}
	return nil
}

// resetGone returns err, unless it says the other run of a reset of run runID is gone (deleted
// or quarantined): nothing can be linked then, and applying the commit again would not help.
func (e *Engine) resetGone(ctx context.Context, runID string, err error) error {
	if errors.Is(err, store.ErrDeleted) || errors.Is(err, store.ErrDamaged) {
		e.logger.WarnContext(ctx, "the other run of a reset is gone; the reset is not carried on", slog.String("run_id", runID),
			slog.String("error", err.Error()))
		return nil
	}
	return err
}

// resetTarget returns the run an input addressed to ended run s follows to: the new run of its
// latest reset, if any.
func resetTarget(s *core.Snapshot) (string, bool) {
	if n := len(s.Resets); n > 0 {
		return s.Resets[n-1].NewRunID, true
	}
	return "", false
}

// workflowOf returns the run ID of the first run of the workflow run runID belongs to: runID
// without the suffixes of resets, then without those of a reuse and of continuations (X for
// X=_n=<gen>); a child's run ID (no reuse family) only loses the resets' suffix.
func workflowOf(runID string) string {
	runID = withoutResets(runID)
	if id, _, ok := event.ReuseFamily(runID); ok {
		return id
	}
	return runID
}

// withoutResets returns runID without the suffixes of resets: the run of a reuse family
// (event.ReuseFamily) it descends from, or a continuation of it.
func withoutResets(runID string) string {
	if i := strings.Index(runID, resetSep); i >= 0 {
		return runID[:i]
	}
	return runID
}

// ResetLockTTL is how long a reset's hold on its workflow's resets lasts when its process dies
// holding it (the history service refuses a reset lock with a longer TTL, or none);
// resetLockWait how long a reset waits for another of the same workflow.
const (
	ResetLockTTL  = 30 * time.Second
	resetLockWait = 20 * time.Second
)

// ResetLockKey names the start key index entry that serializes the resets of the runs of the
// workflow whose first run is workflowRunID (see lockResets).
func ResetLockKey(workflowRunID string) string { return "reset." + digest(workflowRunID) }

// lockResets serializes the resets of the runs of run runID's workflow: a reset checks that the
// workflow goes on in no live run (chainHead) and then records itself in its own old run, so two
// resets of different runs of one workflow (an ID's first run and a later reuse of it, as a
// batch job resets them side by side) would each pass the check before the other's new run
// exists. The hold is an entry of the start key index (Config.Keys), which expires after
// ResetLockTTL if its holder dies; the entry names the run being reset, so resets of the same run
// share it (they are ordered by their records in that run). Without Config.Keys resets are not
// serialized. It returns the release.
func (e *Engine) lockResets(ctx context.Context, runID string) (func(), error) {
	if e.keys == nil {
		return func() {}, nil
	}
	wf := workflowOf(runID)
	key := ResetLockKey(wf)
	want := KeyEntry{RunID: runID, Key: wf}
	deadline := time.Now().Add(resetLockWait)
	backoff := 5 * time.Millisecond
	for {
		cur, _, claimed, err := e.keys.ClaimKey(ctx, key, want, ResetLockTTL)
		if err != nil {
			return nil, fmt.Errorf("serializing the resets of workflow %q: %w", wf, err)
		}
		if claimed || cur.RunID == runID {
			return func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if err := e.keys.ReleaseKey(rctx, key, runID); err != nil {
					e.logger.WarnContext(ctx, "releasing a workflow's reset lock failed; it expires", slog.String("workflow", wf),
						slog.String("run_id", runID), slog.Duration("ttl", ResetLockTTL), slog.String("error", err.Error()))
				}
			}, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: a reset of run %q, of the same workflow, has held it for more than %s; retry",
				ErrResetBusy, cur.RunID, resetLockWait)
		}
		if !wait.For(ctx, backoff) {
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}
