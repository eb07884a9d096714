package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
)

// Signal records signal name with payload for run runID and asks for the run to be driven. A
// run that continued as new passes the signal on to the run it continued as, and so on to the
// latest generation; Signal returns the ID of the run that received it. A delivery ID already
// recorded (in that run or a generation before it) is accepted again without effect. It returns
// an error wrapping core.ErrNotFound, core.ErrTerminal or core.ErrInvalidInput when the signal
// cannot be accepted, or a *PendingError when the run holds as many unconsumed inputs as
// Config.Pending allows; nothing is appended then.
func (e *Engine) Signal(ctx context.Context, runID, name string, payload []byte, deliveryID string) (string, error) {
	return acceptDuplicate(e.forward(ctx, runID, e.pending.admit(func(s *core.Snapshot) ([]event.Payload, error) {
		return core.ReceiveSignal(s, name, payload, deliveryID)
	})))
}

// DeliverHook records payload as the delivery to the hook token routes to. Redelivering the
// same delivery ID is accepted without effect; a different delivery to a hook that already
// received one returns an error wrapping core.ErrAlreadyReceived; an unknown token
// core.ErrNotFound. It returns the ID of the run that owns the hook.
//
// A token that still routes to a run a reset ended (the history service moves the route to the
// reset's new run as the consequence of that run's first commit) is followed to the run the
// reset went on in, and on through its own resets, as inputs follow resets (forward): the run
// that copied the hook (the same hook ID and token) takes the delivery. A hook the old run
// created after the reset point has no copy there, and the delivery is refused as the ended run
// refuses it (core.ErrTerminal).
func (e *Engine) DeliverHook(ctx context.Context, token string, payload []byte, deliveryID string) (string, error) {
	runID, hookID, err := e.host.LookupHook(ctx, token)
	if err != nil {
		return "", fmt.Errorf("looking up hook token: %w", err)
	}
	return acceptDuplicate(e.deliverHook(ctx, runID, hookID, token, payload, deliveryID))
}

// errNoCopy stops a hook delivery followed to a reset run that did not copy the hook.
var errNoCopy = errors.New("the reset run has no copy of the hook")

// deliverHook appends the delivery to hook hookID (token token) of run runID, following resets
// (see DeliverHook). It returns the ID of the run it appended to, or of the run that refused.
func (e *Engine) deliverHook(ctx context.Context, runID, hookID, token string, payload []byte, deliveryID string) (string, error) {
	first := runID
	var refused error // the refusal of the run the token routes to, once it is followed from
	resetOf := ""     // the run whose reset named runID, while runID is followed to from it
	for range maxGenerations {
		var next string
		deliver := func(s *core.Snapshot) ([]event.Payload, error) {
			next = ""
			if h, ok := s.Hooks[hookID]; resetOf != "" && (!ok || h.Token != token) {
				return nil, errNoCopy
			}
			events, err := core.ReceiveHook(s, hookID, payload, deliveryID)
			if errors.Is(err, core.ErrTerminal) {
				if n, ok := resetTarget(s); ok {
					next = n
					if refused == nil {
						refused = err
					}
					return nil, errFollow
				}
			}
			return events, err
		}
		err := e.external(ctx, runID, deliver)
		if resetOf != "" && errors.Is(err, core.ErrNotFound) {
			// The reset is recorded and its new run not written yet: write it (as the history
			// service would), then deliver.
			if err := e.startReset(ctx, resetOf, runID); err != nil {
				return runID, err
			}
			err = e.external(ctx, runID, deliver)
		}
		switch {
		case errors.Is(err, errNoCopy):
			return first, refused
		case !errors.Is(err, errFollow):
			return runID, err
		}
		resetOf, runID = runID, next
	}
	return runID, fmt.Errorf("hook %q of run %q: its run was reset more than %d times in a row", hookID, first, maxGenerations)
}

// Cancel requests cancellation of run runID, or of the latest run it continued as, and returns
// the ID of the run that received the request. Requesting it again is accepted without effect.
func (e *Engine) Cancel(ctx context.Context, runID, reason string) (string, error) {
	return acceptDuplicate(e.forward(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.RequestCancel(s, reason)
	}))
}

// Terminate ends run runID, or the latest run it continued as, as failed at an operator's
// request, cancelling its unsettled steps, whatever its workflow code would decide. It works on
// blocked runs too, and on runs whose stored history is damaged (quarantined or not yet): those
// end from their longest valid prefix, released from the quarantine (AcceptDamage), and one whose
// valid prefix had ended is released as it ended. It returns the ID of the run it ended.
func (e *Engine) Terminate(ctx context.Context, runID, reason string) (string, error) {
	to, err := e.forward(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.Terminate(s, reason)
	})
	if isDamage(err) {
		err = e.terminateDamaged(ctx, to, reason, err)
	}
	return to, err
}

// CancelDelivery is Cancel under deliveryID, which the run's run.cancel_requested records: a
// repeat of the delivery is accepted without effect (nil), even after the run ended, so that a
// caller that cannot tell whether its request was committed (a batch job after a crash) asks
// again. A run whose cancellation another request asked for first returns an error wrapping
// core.ErrCancelRequested; an ended run one wrapping core.ErrTerminal.
func (e *Engine) CancelDelivery(ctx context.Context, runID, reason, deliveryID string) (string, error) {
	return acceptDuplicate(e.forward(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.RequestCancelDelivery(s, reason, deliveryID)
	}))
}

// TerminateDelivery is Terminate under deliveryID, which the run's run.failed records: a repeat
// of the delivery is accepted without effect (nil). A run that ended otherwise returns an error
// wrapping core.ErrTerminal.
func (e *Engine) TerminateDelivery(ctx context.Context, runID, reason, deliveryID string) (string, error) {
	return acceptDuplicate(e.forward(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.TerminateDelivery(s, reason, deliveryID)
	}))
}

// Fire fires timer t: it appends wait.fired or step.retry_fired and asks for the run to be
// driven. A timer that is no longer pending is dropped without error.
//
// A cached snapshot that reaches t.Seq, the event that scheduled t (see Preload), is used
// without reading the run: the append at the snapshot's sequence commits only if nothing was
// appended since, and a conflict reads what was and decides again. A timer that such a
// snapshot shows as not pending is moot however far behind the snapshot is: a fired wait, a
// retry that started and an ended run stay so. A timer whose Seq is unknown (0) is fired on a
// fresh read.
func (e *Engine) Fire(ctx context.Context, t core.Timer) error {
	// Read at least to the event that scheduled the timer: a replica that has not caught up
	// with it would show the timer as not pending, and the timer would be dropped unfired.
	use := readTail
	if t.Seq > 0 {
		use = trustRefusals
	}
	err := e.externalFrom(ctx, t.RunID, max(t.Seq, 1), use, func(s *core.Snapshot) ([]event.Payload, error) {
		return core.Fire(s, t)
	})
	if errors.Is(err, core.ErrStale) {
		return nil
	}
	return err
}

// acceptDuplicate returns to and err, but accepts a repeated delivery (core.ErrDuplicate)
// without effect: nil.
func acceptDuplicate(to string, err error) (string, error) {
	if errors.Is(err, core.ErrDuplicate) {
		return to, nil
	}
	return to, err
}

// forward appends what compute derives from run runID, or, if the run continued as new, from
// the latest run of its chain, starting a successor that is not started yet (as the end of its
// predecessor implies); an ended run whose caller ID a later run reuses (start policies)
// passes the input on to that run. It returns the ID of the run it appended to.
func (e *Engine) forward(ctx context.Context, runID string, compute func(*core.Snapshot) ([]event.Payload, error)) (string, error) {
	// resetOf is the run whose reset named runID, while runID is followed to from it.
	resetOf := ""
	var ended *core.Snapshot
	follow := func(s *core.Snapshot) ([]event.Payload, error) {
		events, err := compute(s)
		if errors.Is(err, core.ErrTerminal) && s.Outcome != nil {
			ended = s
			return nil, errFollow
		}
		return events, err
	}
	for range maxGenerations {
		ended = nil
		err := e.external(ctx, runID, follow)
		if resetOf != "" && errors.Is(err, core.ErrNotFound) {
			// The reset is recorded and its new run not written yet: write it (as the history
			// service would), then deliver.
			if err := e.startReset(ctx, resetOf, runID); err != nil {
				return runID, err
			}
			err = e.external(ctx, runID, follow)
		}
		var de *store.DeletedError
		if errors.As(err, &de) {
			// Deleted after its retention period: its record still says where its chain went.
			if ended, err = core.DeletedSnapshot(runID, de.Seq, de.Time, de.Deletion); err != nil {
				return runID, err
			}
			if _, ok := resetTarget(ended); !ok {
				if ended.Outcome.Outcome == event.OutcomeContinuedAsNew && ended.Outcome.SuccessorRunID == "" {
					return runID, de // a tombstone written before successors were recorded
				}
				if ended.Outcome.Outcome != event.OutcomeContinuedAsNew {
					if _, later, rerr := e.laterReuse(ctx, runID); rerr != nil || !later {
						return runID, cmp.Or(rerr, error(de))
					}
				}
			}
			err = errFollow
		}
		if !errors.Is(err, errFollow) {
			return runID, err
		}
		resetOf = ""
		if next, ok := resetTarget(ended); ok {
			resetOf, runID = runID, next // a run that was reset passes inputs on to the run that replaced it
			continue
		}
		if ended.Outcome.Outcome != event.OutcomeContinuedAsNew {
			// A run that reuses the run's caller ID after it ended takes the input (start
			// policies); else the ended run refuses it.
			next, ok, rerr := e.laterReuse(ctx, runID)
			if rerr != nil {
				return runID, rerr
			}
			if !ok {
				_, err := compute(ended)
				return runID, err
			}
			runID = next
			continue
		}
		if ended.DeletedSeq == 0 { // a deleted run's successor was started long ago
			if err := e.startSuccessor(ctx, ended); err != nil {
				return runID, err
			}
		}
		runID = ended.Outcome.SuccessorRunID
	}
	return runID, fmt.Errorf("run %q continued as new more than %d times while an input followed it", runID, maxGenerations)
}

// maxGenerations bounds how far an input follows a chain of continuations.
const maxGenerations = 1000

var errFollow = errors.New("follow the continuation")

// external appends the events compute derives from the run's current snapshot, re-deriving them
// after a conflict, then wakes the run's driver in this engine, if any, and sends a resume task
// as a fast path (the history service derives the same task). It never waits for a driver: if
// one holds the run it reads a private projection. A cached snapshot is used without reading
// the run first (confirmRefusals): what compute accepts on it commits only if nothing was
// appended since, and what it refuses is decided again on the run as read.
func (e *Engine) external(ctx context.Context, runID string, compute func(*core.Snapshot) ([]event.Payload, error)) error {
	return e.externalFrom(ctx, runID, 1, confirmRefusals, compute) // a run that looks empty is checked with the stream's leader
}

// cachedUse is how externalOnce uses a cached snapshot of the run that reaches the sequence
// asked for. A cached snapshot may be behind the run; the append's expected sequence catches
// one that is, so what compute accepts on it is safe, and only its refusals need care.
type cachedUse int

const (
	// readTail reads the events after the snapshot first.
	readTail cachedUse = iota
	// trustRefusals uses the snapshot as it is: compute's refusals stay true of every later
	// snapshot (Fire's: a fired wait, a retry that started, an ended run stay so).
	trustRefusals
	// confirmRefusals uses the snapshot as it is, and when compute refuses, reads the events
	// after it and asks compute again (a signal refused for the pending inputs the run has
	// consumed since).
	confirmRefusals
)

// externalFrom is external reading the run at least to sequence atLeast (at least 1), using a
// cached snapshot as use says.
func (e *Engine) externalFrom(ctx context.Context, runID string, atLeast uint64, use cachedUse, compute func(*core.Snapshot) ([]event.Payload, error)) error {
	for {
		task, err := e.externalOnce(ctx, runID, atLeast, use, compute)
		var ce *store.ConflictError
		if errors.As(err, &ce) {
			atLeast = max(atLeast, ce.Actual)
			continue
		}
		if err != nil {
			return err
		}
		e.locks.poke(runID)
		e.resume(ctx, task)
		return nil
	}
}

// externalOnce appends once and returns the task that resumes the run after the append.
func (e *Engine) externalOnce(ctx context.Context, runID string, atLeast uint64, use cachedUse, compute func(*core.Snapshot) ([]event.Payload, error)) (Task, error) {
	rl, locked := e.locks.tryLock(runID)
	if locked {
		defer e.locks.unlock(runID, rl)
	}
	var s *core.Snapshot
	if locked {
		s, _ = e.cache.get(runID)
	}
	unread := false
	switch {
	case s != nil && use != readTail && (s.Seq >= atLeast || s.Terminal()):
		// Current unless the append below conflicts.
		unread = true
	case s != nil:
		if err := e.readTail(ctx, s, atLeast); err != nil {
			return Task{}, err
		}
	default:
		var err error
		if s, err = e.snapshot(ctx, runID, atLeast); err != nil {
			return Task{}, err
		}
		if locked {
			// Kept for later inputs; a driver still verifies it on its first load.
			e.cache.put(runID, s, false)
		}
	}
	if err := behind(runID, s.Seq, s.Terminal(), atLeast); err != nil {
		// What compute would decide on this snapshot could be wrong (a timer that looks moot).
		return Task{}, err
	}
	events, err := compute(s)
	if err != nil && unread && use == confirmRefusals {
		if rerr := e.readTail(ctx, s, atLeast); rerr != nil {
			return Task{}, rerr
		}
		events, err = compute(s)
	}
	if err != nil {
		return Task{}, err
	}
	traceInputs(ctx, events)
	first := s.Seq + 1
	if err := e.commit(ctx, s, events); err != nil {
		return Task{}, err
	}
	// The task carries the commit, so that the run's driver applies it instead of reading it.
	committed := make([]event.Envelope, len(events))
	for i, p := range events {
		committed[i] = event.Envelope{RunID: runID, Seq: first + uint64(i), Time: s.UpdatedAt, Payload: p}
	}
	return Task{RunID: runID, Queue: s.Queue, Build: s.Spec.BuildID, Seq: s.Seq, TraceParent: s.TraceParent,
		Head: e.commitHead(runID, committed)}, nil
}

// traceInputs records in the inputs among events (signals, hook deliveries, cancellation
// requests) the traceparent of the span ctx carries: the ingress request that sent them, which
// the decision that answers them links to.
func traceInputs(ctx context.Context, events []event.Payload) {
	tp := tracing.TraceParent(ctx)
	if tp == "" {
		return
	}
	for _, p := range events {
		switch p := p.(type) {
		case *event.SignalReceived:
			p.TraceParent = tp
		case *event.HookReceived:
			p.TraceParent = tp
		case *event.RunCancelRequested:
			p.TraceParent = tp
		case *event.UpdateReceived:
			p.TraceParent = tp
		case *event.RunPaused:
			p.TraceParent = tp
		case *event.RunUnpaused:
			p.TraceParent = tp
		}
	}
}

// readTail applies to s, run runID's cached snapshot, the events committed after it, up to at
// least atLeast; on an error the run leaves the cache.
func (e *Engine) readTail(ctx context.Context, s *core.Snapshot, atLeast uint64) error {
	tail, err := e.store.LoadAtLeast(ctx, s.RunID, s.Seq, atLeast)
	if err == nil {
		err = s.ApplyAll(tail)
	}
	if err != nil {
		e.cache.drop(s.RunID)
	}
	return err
}
