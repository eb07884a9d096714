package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// A driver's commit pipeline (docs/performance.md, "Pipelined commits: what a client may
// observe").
//
// A driver keeps at most one append of its run in flight: a clustered stream refuses a second
// expected-sequence append to a subject behind one in flight (error 10164), and each commit
// chains on the sequence the store acknowledged. While an append is in flight the driver goes
// on: it records the results of the attempts that finish, takes the decision they allow, and
// starts the attempts that decision schedules; the commits it makes meanwhile are buffered and
// appended as one commit, chained on the acknowledged sequence, when the ack arrives. A run of
// quick sequential steps thus pays one append per round of buffering, not one per step.
//
// The contract:
//   - The store, and so every reader of the history (Client.Result, the history service, the
//     runs index, other workers), sees only acknowledged commits, in order, each a whole
//     commit: nothing is observed out of the history that is not durable.
//   - Only step attempts start ahead of their commit, only once the driver owns the run's tail
//     (an append of its own was acknowledged in this drive, so that a commit a dead writer left
//     in flight can no longer land; or the drive is a new run's first, from its task's first
//     delivery), and only those without timeouts (their heartbeats and deadlines are watched
//     from the history). Every other effect of a decision (a child's start, a hook's token, the
//     run's end, the drive's result, a query's answer, a read of the run by another writer on
//     this engine) waits until the pipeline is settled: nothing in flight, nothing buffered.
//   - A rejected append (a conflict with another writer, an unavailable store) discards what is
//     buffered and reads the run again from the store, as a failed append always did; attempts
//     started on commits that were not acknowledged are cancelled and their results ignored;
//     results of attempts whose schedule was acknowledged are recorded again. A step may thus
//     run, ahead of its commit, with an input derived from results that are then lost (the
//     worker died, or another writer won the sequence), and run again after with another input:
//     steps already run at least once, and their idempotency keys name the run and step, not
//     the input.
//
// The snapshot (driver.s) is the run as recorded by the pipeline, ahead of the store by what is
// in flight and buffered: the store is at the sequence before the first commit in flight.

// The bounds of a buffered commit: past them, the driver waits for the commit in flight and
// sends the buffer before it records more. maxBufferBytes, estimated from the payloads
// (payloadBytes), keeps a commit well under NATS's default max_payload of 1 MiB (a payload
// above the offload threshold, 256 KiB by default, is a reference).
const (
	maxBufferedEvents = 1024
	maxBufferBytes    = 512 << 10
)

// pendingCommit is one commit of the pipeline: in flight or buffered.
type pendingCommit struct {
	// first is the sequence of events[0]; the commit chains on first-1.
	first  uint64
	events []event.Event
	// bytes estimates the commit's size (payloadBytes).
	bytes int
	// results are the attempt results it records, recorded again after a conflict; failed are
	// those that failed, logged once committed.
	results, failed []attemptResult
	// decisions are the code's decisions it holds, whose spans and effects follow the ack.
	decisions []pendingDecision
}

// pendingDecision is a decision a pendingCommit holds: its events, the sequence of the first,
// when it began and the traces of the inputs it answers.
type pendingDecision struct {
	began  time.Time
	at     uint64
	events []event.Payload
	traces []string
}

// add appends o, which follows c, to c.
func (c *pendingCommit) add(o *pendingCommit) {
	c.events = append(c.events, o.events...)
	c.bytes += o.bytes
	c.results = append(c.results, o.results...)
	c.failed = append(c.failed, o.failed...)
	c.decisions = append(c.decisions, o.decisions...)
}

// pending reports whether the pipeline holds a commit in flight or buffered.
func (d *driver) pending() bool { return d.inflight != nil }

// full reports whether the buffer cannot take another results attempt results and events
// events, of about bytes bytes in all.
func (d *driver) full(results, events, bytes int) bool {
	b := d.buffer
	return b != nil && (len(b.results)+results > maxResultsPerCommit || len(b.events)+events > maxBufferedEvents ||
		b.bytes+bytes > maxBufferBytes)
}

// overhead estimates the encoded size of an event's envelope and fields, besides its JSON
// payloads.
const overhead = 256

// payloadBytes estimates the encoded size of p: its JSON payloads and their overhead.
func payloadBytes(p event.Payload) int {
	switch p := p.(type) {
	case *event.StepCompleted:
		return overhead + len(p.Output)
	case *event.StepScheduled:
		n := overhead
		for _, st := range p.Steps {
			n += overhead + len(st.Input)
		}
		return n
	}
	return 2 * overhead
}

// resultBytes estimates the encoded size of the results' events, as payloadBytes does.
func resultBytes(results []attemptResult) int {
	n := 0
	for _, r := range results {
		n += overhead + len(r.out.Output)
	}
	return n
}

// enqueue sends c, already applied to the snapshot, or buffers it behind the commit in flight.
func (d *driver) enqueue(ctx context.Context, c *pendingCommit) {
	switch {
	case d.inflight == nil:
		d.send(ctx, c)
	case d.buffer == nil:
		d.buffer = c
	default:
		d.buffer.add(c)
	}
}

// send appends c in the background; its outcome arrives on d.acked.
func (d *driver) send(ctx context.Context, c *pendingCommit) {
	d.inflight = c
	go func() {
		err := d.e.faults.Hit(fault.StoreAppend)
		if err == nil {
			err = d.e.appendEvents(ctx, d.runID, c.first-1, c.events)
		}
		d.acked <- err
	}()
}

// ackArrived handles the outcome of the append in flight: on success it sends the buffer and
// carries out what the commit's decisions cause; on failure it reads the run again and reports
// changed. An error stops the drive.
func (d *driver) ackArrived(ctx context.Context, appendErr error) (changed bool, err error) {
	c := d.inflight
	d.inflight = nil
	if appendErr != nil {
		return true, d.pipelineFailed(ctx, c, appendErr)
	}
	d.proven = true
	if b := d.buffer; b != nil {
		d.buffer = nil
		d.send(ctx, b)
	}
	return false, d.afterCommit(ctx, c)
}

// settled waits until nothing is in flight or buffered, and reports whether the snapshot
// changed meanwhile (an append failed and the run was read again): the caller then decides
// anew.
func (d *driver) settled(ctx context.Context) (changed bool, err error) {
	for d.inflight != nil {
		select {
		case appendErr := <-d.acked:
			c, err := d.ackArrived(ctx, appendErr)
			changed = changed || c
			if err != nil {
				return changed, err
			}
		case <-ctx.Done():
			return changed, ctx.Err()
		}
	}
	return changed, nil
}

// afterCommit carries out what an acknowledged commit causes: the log of its failed attempts,
// its decisions' spans, and the child runs they start (a fast path, repeated by the history
// service).
func (d *driver) afterCommit(ctx context.Context, c *pendingCommit) error {
	e := d.e
	for _, r := range c.failed {
		e.logger.WarnContext(ctx, "step attempt failed", slog.String("run_id", d.runID), slog.String("step_id", r.a.StepID),
			slog.Int("attempt", r.a.Attempt), slog.String("error", r.out.Err.Error()))
	}
	for _, dec := range c.decisions {
		dctx, span := d.decided(ctx, dec.began, dec.at, dec.events, dec.traces, nil)
		d.logDecision(dctx, dec.events)
		err := e.startChildren(dctx, d.s, dec.events)
		span.End()
		if err != nil {
			return err
		}
	}
	return nil
}

// pipelineFailed handles the failed append of c: the buffer is discarded, the run read again,
// the attempts started ahead of an unacknowledged commit cancelled, and, after a conflict, the
// results of attempts whose schedule was acknowledged recorded again.
func (d *driver) pipelineFailed(ctx context.Context, c *pendingCommit, appendErr error) error {
	acked := c.first - 1
	lost := c.results
	if b := d.buffer; b != nil {
		lost = append(lost, b.results...)
		d.buffer = nil
	}
	d.waiting = nil
	// What was started ahead of an unacknowledged commit belongs to the epoch that ends here.
	d.epochEnds = append(d.epochEnds, acked)
	d.epoch++
	for k, run := range d.running {
		if run.at > acked {
			run.cancel()
			delete(d.running, k)
		}
	}
	if err := d.reload(ctx, appendErr); err != nil {
		return err
	}
	if !errors.Is(appendErr, store.ErrConflict) {
		return fmt.Errorf("recording step results of run %q: %w", d.runID, appendErr)
	}
	if again := d.valid(lost); len(again) > 0 {
		return d.recordOnce(ctx, again)
	}
	return nil
}

// valid returns the results of attempts that started on acknowledged commits: in this epoch,
// or in an earlier one on a commit acknowledged before it ended. The others ran on a schedule
// the store refused; the run as read may even schedule the same attempt with another input.
func (d *driver) valid(results []attemptResult) []attemptResult {
	if d.epoch == 0 {
		return results // no append was refused: every attempt started in this epoch
	}
	kept := results[:0:0]
	for _, r := range results {
		if r.epoch == d.epoch || r.at <= d.epochEnds[r.epoch] {
			kept = append(kept, r)
		}
	}
	return kept
}

// pipe applies decision to the snapshot, which already holds events (the results it answers),
// and sends or buffers both as one commit at t.
func (d *driver) pipe(ctx context.Context, first uint64, t, began time.Time, results, failed []attemptResult, events, decision []event.Payload, traces []string) error {
	e := d.e
	c := &pendingCommit{first: first, results: results, failed: failed}
	// The decision is offloaded before it is applied: the snapshot holds what the store will.
	for _, ps := range [][]event.Payload{events, decision} {
		if err := e.offload(ctx, ps); err != nil {
			e.cache.drop(d.runID) // holds results never committed
			return fmt.Errorf("recording step results of run %q: %w", d.runID, err)
		}
	}
	if len(decision) > 0 {
		at := d.s.Seq + 1
		if err := e.applyCommitted(d.s, at, t, decision); err != nil {
			return err
		}
		c.decisions = []pendingDecision{{began: began, at: at, events: decision, traces: traces}}
	}
	c.events = make([]event.Event, 0, len(events)+len(decision))
	for _, ps := range [][]event.Payload{events, decision} {
		for _, p := range ps {
			c.events = append(c.events, event.Event{Time: t, Payload: p})
			c.bytes += payloadBytes(p)
		}
	}
	d.enqueue(ctx, c)
	return nil
}

// pipeable reports whether the decision events, made by the drive loop, may go through the
// pipeline: unless commits are serial, and except a hook's creation (its token is registered
// before the commit) and a child's cancellation (requested right after the commit, see
// commitDecision).
func (d *driver) pipeable(events []event.Payload) bool {
	if d.e.serialCommits || len(core.ChildCancellations(events)) > 0 {
		return false
	}
	for _, p := range events {
		if _, ok := p.(*event.HookCreated); ok {
			return false
		}
	}
	return true
}

// pipeDecision sends or buffers the decision events, begun at began, as a commit of their own
// (pipe, without results).
func (d *driver) pipeDecision(ctx context.Context, began time.Time, events []event.Payload) error {
	t := d.e.now(d.s)
	core.Stamp(events, t)
	return d.pipe(ctx, d.s.Seq+1, t, began, nil, nil, nil, events, d.s.InputTraces())
}

// mayStart reports whether attempt a may start now: when nothing is in flight, or ahead of the
// commit that schedules it once the driver owns the run's tail (proven) and the step has no
// timeout (its heartbeats and deadlines are watched from the history).
func (d *driver) mayStart(a core.Attempt) bool {
	return !d.pending() || a.Timeouts.IsZero() && d.ownsTail()
}

// ownsTail reports proven, first settling an unconfirmed first writer's claim: it owns the
// run's tail only if its task's copy was the first (Task.Backing), and no other drive can have
// started from an earlier one.
func (d *driver) ownsTail() bool {
	if d.unconfirmed {
		d.unconfirmed = false
		fresh, err := d.backing()
		d.proven = d.proven || err == nil && fresh
	}
	return d.proven
}
