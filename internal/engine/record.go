package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// maxResultsPerCommit bounds how many attempt results one commit records.
const maxResultsPerCommit = 256

// record commits the result of attempt r, with the results of every other attempt of the run
// that finished meanwhile, unless the run moved on without them. The commit also holds the
// decision the code makes on those results, where it makes one at once: the next step (or
// batch), a wait, a child, the run's end. A run of sequential steps thus writes at most one
// commit per step, and a batch's members that finish together share one. Unless the engine's
// commits are serial, the commit goes through the driver's pipeline (pipeline.go): appended
// in the background, or buffered behind the append in flight.
//
// The results are applied to the snapshot before the code decides on them, so until the
// append succeeds the snapshot is ahead of the store: an append that fails (a conflict with
// another writer, an unavailable store) makes the driver read the run again from the store.
// A decision that cannot be made at once (the code fails, or it creates a hook, whose token is
// registered before its commit) is left to the drive loop, which decides again on the results
// once they are committed.
func (d *driver) record(ctx context.Context, r attemptResult) error {
	results := d.drain(r)
	for {
		err := d.recordOnce(ctx, results)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		// recordOnce read the run again: derive the results anew from what it read.
	}
}

// drain returns r and the results of the run's other attempts that are ready now, and stops
// tracking their attempts. The results of attempts this driver dropped (a later run of the
// same attempt replaced them, see attemptRun.gen) are left out.
func (d *driver) drain(r attemptResult) []attemptResult {
	results := []attemptResult{r}
	for len(results) < maxResultsPerCommit {
		select {
		case more := <-d.results:
			results = append(results, more)
			continue
		default:
		}
		break
	}
	kept := results[:0]
	for _, r := range results {
		key := attemptKey{r.a.StepID, r.a.Attempt}
		run, ok := d.running[key]
		if !ok || run.gen != r.gen {
			continue
		}
		run.cancel()
		delete(d.running, key)
		kept = append(kept, r)
	}
	return kept
}

// recordOnce commits results, with the decision they allow, at the run's current sequence. On
// an error wrapping store.ErrConflict the snapshot has been read again from the store.
func (d *driver) recordOnce(ctx context.Context, results []attemptResult) error {
	e := d.e
	if d.pending() && d.full(len(results), 2*len(results), resultBytes(results)) {
		// The buffer is full: the commit in flight and the buffer go first.
		if _, err := d.settled(ctx); err != nil {
			return err
		}
	}
	if results = d.valid(results); len(results) == 0 {
		return nil
	}
	expected := d.s.Seq
	t := e.now(d.s)
	var events []event.Payload
	var failed []attemptResult
	for _, r := range results {
		evs, err := core.StepResult(d.s, r.a.StepID, r.a.Attempt, r.out, t)
		if errors.Is(err, core.ErrStale) {
			continue
		}
		if err == nil {
			err = e.applyCommitted(d.s, d.s.Seq+1, t, evs)
		}
		if err != nil {
			if len(events) > 0 {
				e.cache.drop(d.runID) // holds results never committed
			}
			return fmt.Errorf("recording step %q attempt %d of run %q: %w", r.a.StepID, r.a.Attempt, d.runID, err)
		}
		events = append(events, evs...)
		if r.out.Err != nil {
			failed = append(failed, r)
		}
	}
	if len(events) == 0 {
		return nil
	}
	return d.commitInputs(ctx, expected, t, results, failed, events)
}

// commitInputs commits events, inputs already applied to the snapshot at t after sequence
// expected (the results of attempts, the firings of due timers), with the decision the code
// makes on them where it makes one at once: through the pipeline, or appended at once when
// commits are serial. On an error wrapping store.ErrConflict the snapshot has been read again
// from the store.
func (d *driver) commitInputs(ctx context.Context, expected uint64, t time.Time, results, failed []attemptResult, events []event.Payload) error {
	e := d.e
	first := expected + 1
	// From here until the append succeeds the snapshot holds events the store may not.
	began := time.Now()
	decision, traces := d.decideAhead(t)
	if !e.serialCommits {
		return d.pipe(ctx, first, t, began, results, failed, events, decision, traces)
	}
	err := e.append(ctx, d.runID, expected, t, append(events, decision...))
	if err != nil {
		d.waiting = nil
		if rerr := d.reload(ctx, err); rerr != nil {
			return rerr
		}
		if errors.Is(err, store.ErrConflict) {
			return err
		}
		return fmt.Errorf("recording %d events of run %q: %w", len(events), d.runID, err)
	}
	for _, r := range failed {
		e.logger.WarnContext(ctx, "step attempt failed", slog.String("run_id", d.runID), slog.String("step_id", r.a.StepID),
			slog.Int("attempt", r.a.Attempt), slog.String("error", r.out.Err.Error()))
	}
	if len(decision) == 0 {
		return nil
	}
	at := first + uint64(len(events))
	if err := e.applyCommitted(d.s, at, t, decision); err != nil {
		return err
	}
	ctx, span := d.decided(ctx, began, at, decision, traces, nil)
	defer span.End()
	d.logDecision(ctx, decision)
	return e.startChildren(ctx, d.s, decision)
}

// decideAhead asks the code for the decision it makes on the snapshot, whose latest events
// are not committed yet, and returns its events, stamped for a commit at t, with the traces of
// the inputs it answers; or nil when the drive loop must decide (the code is waiting, fails,
// or creates a hook).
func (d *driver) decideAhead(t time.Time) ([]event.Payload, []string) {
	if d.replayErr != nil {
		return nil, nil
	}
	if _, held := d.held(); held {
		return nil, nil // the drive loop stops the drive
	}
	v, err := d.decide()
	if err != nil {
		return nil, nil
	}
	if v.Waiting() {
		// Valid once the results are committed, at the snapshot's current sequence.
		d.waiting = &waitingVerdict{seq: d.s.Seq, v: v}
		return nil, nil
	}
	for _, p := range v.Events {
		if _, ok := p.(*event.HookCreated); ok {
			return nil, nil
		}
	}
	core.Stamp(v.Events, t)
	return v.Events, d.s.InputTraces()
}

// waitingVerdict is a waiting verdict of the code on the snapshot at seq.
type waitingVerdict struct {
	seq uint64
	v   core.Verdict
}

// reload reads the run again from the store after an append of events already applied to the
// snapshot failed with err: up to at least the sequence a conflict reported.
func (d *driver) reload(ctx context.Context, err error) error {
	d.e.cache.drop(d.runID)
	atLeast := uint64(0)
	var ce *store.ConflictError
	if errors.As(err, &ce) {
		atLeast = ce.Actual
	}
	hist, lerr := d.e.store.LoadAtLeast(ctx, d.runID, 0, atLeast)
	if lerr != nil {
		return fmt.Errorf("reading run %q again after a failed append (%v): %w", d.runID, err, lerr)
	}
	s, perr := core.Project(d.runID, hist)
	if perr != nil {
		return perr
	}
	if berr := behind(d.runID, s.Seq, s.Terminal(), atLeast); berr != nil {
		return berr
	}
	d.s = s
	d.e.cache.put(d.runID, s, true)
	return nil
}
