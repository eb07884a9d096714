package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
)

// Update records update updateID, called name, with payload, for run runID (update.received)
// and asks for the run to be driven; the run's next decision accepts or rejects it. As a signal
// does, an update follows a run that continued as new to the latest generation; Update returns
// the ID of the run that received it. An update ID already recorded with the same name and
// payload is accepted again without effect (the caller then reads its outcome); with another
// one it returns an error wrapping core.ErrDeliveryConflict. It returns an error wrapping
// core.ErrNotFound, core.ErrTerminal or core.ErrInvalidInput when the update cannot be
// accepted, or a *PendingError when the run holds as many unconsumed inputs as Config.Pending
// allows; nothing is appended then.
func (e *Engine) Update(ctx context.Context, runID, updateID, name string, payload []byte) (string, error) {
	to, err := e.forward(ctx, runID, e.pending.admit(receiveUpdate(updateID, name, payload)))
	if errors.Is(err, core.ErrDuplicate) {
		return to, nil
	}
	return to, err
}

// UpdateWithStart is Update for a run that may not exist yet: when run p.RunID does not exist,
// it is started with the update in one commit (run.started and update.received at sequence 0),
// so that no run of p.RunID ever exists without it; when it exists, it must have been started
// as p would start it (the rules of Start: else a *RunExistsError) and the update is appended
// to it as Update does. created reports whether this call started the run.
func (e *Engine) UpdateWithStart(ctx context.Context, p StartParams, updateID, name string, payload []byte) (runID string, created bool, err error) {
	return e.startWith(ctx, p, e.pending.admit(receiveUpdate(updateID, name, payload)))
}

// SignalWithStart is Signal for a run that may not exist yet, as UpdateWithStart is Update: the
// run is started with the signal in one commit, or the signal is appended to the run started
// as p would start it.
func (e *Engine) SignalWithStart(ctx context.Context, p StartParams, name string, payload []byte, deliveryID string) (runID string, created bool, err error) {
	return e.startWith(ctx, p, e.pending.admit(func(s *core.Snapshot) ([]event.Payload, error) {
		return core.ReceiveSignal(s, name, payload, deliveryID)
	}))
}

func receiveUpdate(updateID, name string, payload []byte) func(*core.Snapshot) ([]event.Payload, error) {
	return func(s *core.Snapshot) ([]event.Payload, error) {
		return core.ReceiveUpdate(s, updateID, name, payload)
	}
}

// startWith starts run p.RunID with the input compute derives from its first snapshot, in one
// commit at expected sequence 0, or, when the run exists (the append conflicts), checks that it
// was started like p and appends the input to it (or to the latest run it continued as). The
// input is recorded exactly once either way: a duplicate (ErrDuplicate) is success.
func (e *Engine) startWith(ctx context.Context, p StartParams, compute func(*core.Snapshot) ([]event.Payload, error)) (string, bool, error) {
	if p.RunID == "" {
		return "", false, fmt.Errorf("%w: a start with an input needs a run ID, so that a retry finds the run it started", core.ErrInvalidInput)
	}
	started, err := e.prepareStart(&p)
	if err != nil {
		return "", false, err
	}
	started.TraceParent = tracing.TraceParent(ctx)
	at := e.clock.Now().UTC()
	// The input as it would be recorded right after run.started: a new run's first snapshot.
	first := core.New(p.RunID)
	if err := first.Apply(event.Envelope{RunID: p.RunID, Seq: 1, Time: at, Payload: started}); err != nil {
		return "", false, err
	}
	inputs, err := compute(first)
	if err != nil {
		return "", false, err
	}
	traceInputs(ctx, inputs)
	payloads := append([]event.Payload{started}, inputs...)
	if err := e.offload(ctx, payloads); err != nil {
		return "", false, fmt.Errorf("appending run.started with its input: %w", err)
	}
	started = payloads[0].(*event.RunStarted)
	if err := e.faults.Hit(fault.StoreAppend); err != nil {
		return "", false, fmt.Errorf("appending run.started with its input: %w", err)
	}
	events := make([]event.Event, len(payloads))
	for i, pl := range payloads {
		events[i] = event.Event{Time: at, Payload: pl}
	}
	_, err = e.store.Append(ctx, p.RunID, 0, events...)
	countAppend(ctx, err)
	if errors.Is(err, store.ErrConflict) {
		if err := e.sameStart(ctx, p.RunID, started); err != nil {
			return p.RunID, false, err
		}
		to, err := e.forward(ctx, p.RunID, compute)
		if errors.Is(err, core.ErrDuplicate) {
			err = nil
		}
		return to, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("appending run.started with its input: %w", err)
	}
	e.logger.DebugContext(ctx, "run started with an input", slog.String("run_id", p.RunID), slog.String("definition", p.Spec.Definition))
	committed := make([]event.Envelope, len(payloads))
	for i, pl := range payloads {
		committed[i] = event.Envelope{RunID: p.RunID, Seq: uint64(i + 1), Time: at, Payload: pl}
	}
	e.resume(ctx, Task{RunID: p.RunID, Queue: p.Queue, Build: p.Spec.BuildID, Seq: uint64(len(payloads)), TraceParent: started.TraceParent,
		Head: e.commitHead(p.RunID, committed)})
	return p.RunID, true, nil
}
