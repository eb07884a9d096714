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

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Reset and rerun (docs/reset.md) start a new run from a prefix of an old run's history. The
// writes, in order:
//
//  1. the new run, appended create-only at sequence 0 under a deterministic run ID (ResetRunID):
//     run.started with reset_from, the old run's events 2..point and the reapplied inputs, in
//     one commit. It is the reset's decision: a repeat finds it and returns the same run.
//  2. run.reset in the old run, naming the new run, with the old run's termination in the same
//     commit if it was active. It follows from 1 (ApplyCommit of the new run's run.started,
//     which the history service applies to every commit), so a crash between them delays it
//     and never loses it.
//  3. the inputs the old run recorded after the copy and before run.reset, passed on to the new
//     run with their delivery and update IDs (deduplicated there), and the routes of the hook
//     tokens the new run copied, taken over from the old run, which has ended by then. Both
//     follow from 2 (ApplyCommit of the old run's run.reset) and are idempotent.
//
// Reset does all three at once as a fast path; the last needs write access to the hook routes,
// which the ingress does not have under natsperm, so there the history service does it.

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

// Reset starts a new run from a prefix of run p.RunID's history, as p asks (see ResetParams),
// records run.reset in the old run, ending it if it is active, and returns the new run's ID. A
// repeat of the same reset (the same RequestID, or without one the same point, mode and
// options) returns the same run. Errors wrap core.ErrNotFound, core.ErrInvalidInput (a
// *core.ResetPointError for a point that is not a reset point) or ErrResetConflict.
func (e *Engine) Reset(ctx context.Context, p ResetParams) (string, error) {
	if err := event.ValidateDerivedRunID(p.RunID); err != nil {
		return "", fmt.Errorf("%w: %w", core.ErrInvalidInput, err)
	}
	hist, err := e.store.LoadAtLeast(ctx, p.RunID, 0, 1)
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
	if err := e.faults.Hit(fault.StoreAppend); err != nil {
		return "", fmt.Errorf("appending the reset run: %w", err)
	}
	events := plan.Events(hist[0].Time, e.clock.Now().UTC())
	if err := e.offloadEvents(ctx, events); err != nil { // a rerun's new large input
		return "", fmt.Errorf("appending the reset run: %w", err)
	}
	last, err := e.store.Append(ctx, newID, 0, events...)
	countAppend(ctx, err)
	from := plan.Started.ResetFrom
	switch {
	case errors.Is(err, store.ErrConflict):
		if from, err = e.sameReset(ctx, newID, from); err != nil {
			return "", err
		}
	case err != nil:
		return "", fmt.Errorf("appending the reset run %q: %w", newID, err)
	default:
		e.logger.InfoContext(ctx, "run reset", slog.String("run_id", p.RunID), slog.String("new_run_id", newID),
			slog.Uint64("point", plan.Point), slog.String("mode", string(p.Mode)))
	}
	if err := e.faults.Hit(fault.AfterResetStartBeforeLink); err != nil {
		return newID, nil // the history service links the runs when it applies the new run's start
	}
	if err := e.linkReset(ctx, newID, from); err != nil {
		e.logger.WarnContext(ctx, "the old run does not record its reset yet; the history service records it", slog.String("run_id", p.RunID),
			slog.String("new_run_id", newID), slog.String("error", err.Error()))
	} else if err := e.faults.Hit(fault.AfterResetLinkBeforeHooks); err == nil {
		if err := e.afterReset(ctx, p.RunID, newID); err != nil {
			// An ingress may not write hook routes: the history service does it.
			e.logger.DebugContext(ctx, "the reset's late inputs and hook routes are left to the history service", slog.String("run_id", p.RunID),
				slog.String("new_run_id", newID), slog.String("error", err.Error()))
		}
	}
	if last > 0 {
		e.resume(ctx, Task{RunID: newID, Queue: plan.Started.Queue, Build: plan.Started.Spec.BuildID, Seq: last, TraceParent: plan.Started.TraceParent})
	}
	return newID, nil
}

// sameReset checks that run newID, which exists, is the reset want describes (a repeat), and
// returns its record.
func (e *Engine) sameReset(ctx context.Context, newID string, want *event.ResetFrom) (*event.ResetFrom, error) {
	hist, err := e.store.LoadAtLeast(ctx, newID, 0, 1)
	if err != nil {
		return nil, fmt.Errorf("loading run %q: %w", newID, err)
	}
	if len(hist) == 0 {
		return nil, fmt.Errorf("run %q is taken but holds no event; retry", newID)
	}
	st, ok := hist[0].Payload.(*event.RunStarted)
	if !ok || st.ResetFrom == nil || st.ResetFrom.RunID != want.RunID {
		return nil, fmt.Errorf("%w: run %q exists and is not a reset of run %q", ErrRunExists, newID, want.RunID)
	}
	got := st.ResetFrom
	if want.RequestID != "" && (got.Seq != want.Seq || got.Mode != want.Mode || got.StepID != want.StepID ||
		got.DropInputs != want.DropInputs || got.InputReplaced != want.InputReplaced) {
		return nil, fmt.Errorf("%w: request %q reset run %q to seq %d (%s) as run %q; this request asks for seq %d (%s): use a new request ID",
			ErrResetConflict, want.RequestID, want.RunID, got.Seq, got.Mode, newID, want.Seq, want.Mode)
	}
	return got, nil
}

// linkReset records in the old run of from the reset that created run newID: run.reset, and
// the old run's termination if it is active. Idempotent. What run.reset implies in turn
// (afterReset) follows from that commit.
func (e *Engine) linkReset(ctx context.Context, newID string, from *event.ResetFrom) error {
	err := e.external(ctx, from.RunID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.RecordReset(s, newID, from)
	})
	if err != nil && !errors.Is(err, core.ErrDuplicate) {
		return fmt.Errorf("recording the reset in run %q: %w", from.RunID, err)
	}
	return nil
}

// afterReset carries out what old run oldID's run.reset naming run newID implies: the inputs
// the old run recorded after the reset copied it and before run.reset are passed on to the new
// run (unless the reset drops inputs), and the hook tokens the new run copied and still waits
// on are routed to it. Idempotent: deliveries are deduplicated by their IDs, and a token is
// taken over only from a run that ended.
func (e *Engine) afterReset(ctx context.Context, oldID, newID string) error {
	ns, err := e.snapshot(ctx, newID, 1)
	if err != nil {
		return fmt.Errorf("loading the reset run %q: %w", newID, err)
	}
	from := ns.ResetFrom
	if from == nil || from.RunID != oldID {
		return fmt.Errorf("%w: run %q is not a reset of run %q", core.ErrInvalidHistory, newID, oldID)
	}
	oldHist, err := e.store.LoadAtLeast(ctx, oldID, 0, from.CopiedTo)
	if err != nil {
		return fmt.Errorf("loading run %q: %w", oldID, err)
	}
	os, err := core.Project(oldID, oldHist)
	if err != nil {
		return err
	}
	link, ok := os.ResetOf(newID)
	if !ok {
		return fmt.Errorf("run %q records no run.reset naming run %q yet", oldID, newID)
	}
	if !from.DropInputs && link.Seq > from.CopiedTo+1 {
		for _, in := range core.ReapplicableInputs(oldHist, from.CopiedTo, link.Seq-1) {
			if err := e.passOn(ctx, newID, in); err != nil {
				return err
			}
		}
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

// passOn records input in, recorded by a reset's old run after the copy, in the new run newID
// with its delivery or update ID. One the new run already has, cannot take (its hook is not
// created there, it ended) or took another delivery for is skipped.
func (e *Engine) passOn(ctx context.Context, newID string, in event.Envelope) error {
	err := e.external(ctx, newID, func(s *core.Snapshot) ([]event.Payload, error) {
		switch p := in.Payload.(type) {
		case *event.SignalReceived:
			return core.ReceiveSignal(s, p.Name, p.Payload, p.DeliveryID)
		case *event.HookReceived:
			return core.ReceiveHook(s, p.HookID, p.Payload, p.DeliveryID)
		case *event.UpdateReceived:
			return core.ReceiveUpdate(s, p.UpdateID, p.Name, p.Payload)
		}
		return nil, core.ErrDuplicate
	})
	switch {
	case err == nil, errors.Is(err, core.ErrDuplicate):
		return nil
	case errors.Is(err, core.ErrTerminal), errors.Is(err, core.ErrNotFound), errors.Is(err, core.ErrAlreadyReceived),
		errors.Is(err, core.ErrDeliveryConflict):
		e.logger.InfoContext(ctx, "an input of the old run is not passed on to its reset", slog.String("run_id", in.RunID),
			slog.Uint64("seq", in.Seq), slog.String("new_run_id", newID), slog.String("error", err.Error()))
		return nil
	}
	return fmt.Errorf("passing %s (seq %d) of run %q on to its reset %q: %w", in.Type(), in.Seq, in.RunID, newID, err)
}

// applyReset carries out what a commit of run s.RunID implies for resets (called by
// ApplyCommit): a reset run's run.started links the old run (linkReset), and an old run's
// run.reset passes on its late inputs and the new run's hook tokens (afterReset).
func (e *Engine) applyReset(ctx context.Context, s *core.Snapshot, commit []event.Envelope) error {
	for _, ev := range commit {
		switch p := ev.Payload.(type) {
		case *event.RunStarted:
			if p.ResetFrom != nil {
				if err := e.linkReset(ctx, s.RunID, p.ResetFrom); err != nil {
					return e.resetGone(ctx, s.RunID, err)
				}
			}
		case *event.RunReset:
			if err := e.afterReset(ctx, s.RunID, p.NewRunID); err != nil {
				return e.resetGone(ctx, s.RunID, err)
			}
		}
	}
	return nil
}

// resetGone returns err, unless it says the other run of a reset of run runID is gone (deleted
// or quarantined): nothing can be linked then, and applying the commit again would not help.
func (e *Engine) resetGone(ctx context.Context, runID string, err error) error {
	if errors.Is(err, core.ErrNotFound) || errors.Is(err, store.ErrDamaged) {
		e.logger.WarnContext(ctx, "the other run of a reset is gone; its link is not recorded", slog.String("run_id", runID),
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
