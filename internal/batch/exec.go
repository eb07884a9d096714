package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/wait"
)

// Executor runs jobs: it records a pending job's targets, then applies its operation to them
// window by window. One executor at a time should run a job (the scheduler's batch lease says
// which); two that overlap for a moment cannot count a window twice, since each window's
// results are written with a compare-and-set at the cursor the window started from.
type Executor struct {
	Store  *Store
	JS     jetstream.JetStream
	Engine Engine
	// Name is the replica's name, recorded in the job as its executor.
	Name string
	// Window is the number of targets whose results one write records. Defaults to 100. A
	// window also ends after WindowTime (default 1s), so that a slow job's progress shows.
	Window     int
	WindowTime time.Duration
	// Concurrency bounds the operations in flight at once. Defaults to 16.
	Concurrency int
	// Faults injects failures between the writes (nil: none). An armed Fail ends Run at once
	// with the error, as the death of the process there would.
	Faults *fault.Injector
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// Attempts bounds the tries of an operation that fails with a transient error. Defaults
	// to 5.
	Attempts int
}

func (x *Executor) now() time.Time {
	if x.Now != nil {
		return x.Now().UTC()
	}
	return time.Now().UTC()
}

// ErrLost is returned by Run when another executor advanced the job meanwhile.
var ErrLost = errors.New("batch: another executor advanced the job")

// Run takes job id from where it stands to its end, or until ctx ends, a write fails or another
// executor advances it (ErrLost). It returns nil when the job ended (it was already ended).
func (x *Executor) Run(ctx context.Context, id string) error {
	window := x.Window
	if window <= 0 {
		window = 100
	}
	j, rev, err := x.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	if j.State == StatePending {
		if j, rev, err = x.resolve(ctx, j, rev); err != nil {
			return err
		}
	}
	rate := j.Spec.EffectiveRate()
	bucket := NewBucket(rate, BurstFor(rate), x.now())
	var chunk []string
	chunkN := -1
	for !j.State.Ended() {
		if err := ctx.Err(); err != nil {
			return err
		}
		ev := Event{At: x.now(), Executor: x.Name}
		switch {
		case j.StopRequested:
			ev.Kind = EventStopped
		case j.Cursor >= j.Total:
			if err := x.Faults.Hit(fault.BatchBeforeEnd); err != nil {
				return err
			}
			ev.Kind = EventCompleted
		default:
			if n := j.Cursor / ChunkSize; n != chunkN {
				if chunk, err = x.Store.Targets(ctx, j.ID, n); err != nil {
					return x.fail(ctx, j, rev, fmt.Sprintf("the targets are lost: %v", err))
				}
				chunkN = n
			}
			off := j.Cursor % ChunkSize
			end := min(len(chunk), off+window, off+(j.Total-j.Cursor))
			if off >= end {
				return x.fail(ctx, j, rev, fmt.Sprintf("chunk %d of the targets holds %d runs; the cursor is at %d", chunkN, len(chunk), j.Cursor))
			}
			results, err := x.apply(ctx, &j, chunk[off:end], bucket)
			if err != nil {
				return err
			}
			if err := x.Faults.Hit(fault.BatchBeforeCursor); err != nil {
				return err
			}
			ev.Kind, ev.From, ev.Results = EventProgress, j.Cursor, results
		}
		if j, rev, err = x.change(ctx, j, rev, ev); err != nil {
			return err
		}
	}
	return nil
}

// resolve records a pending job's targets, then marks it running. A job stopped meanwhile
// stays stopped: the chunks written are left unused.
func (x *Executor) resolve(ctx context.Context, j Job, rev uint64) (Job, uint64, error) {
	if j.StopRequested {
		return j, rev, nil
	}
	ids, total, err := Resolve(ctx, x.JS, &j, 0)
	if errors.Is(err, ErrInvalid) {
		j, rev, err := x.failed(ctx, j, rev, err.Error())
		return j, rev, err
	}
	if err != nil {
		return j, rev, err
	}
	chunks := (total + ChunkSize - 1) / ChunkSize
	for n := range chunks {
		if err := x.Store.PutTargets(ctx, j.ID, n, ids[n*ChunkSize:min(total, (n+1)*ChunkSize)]); err != nil {
			return j, rev, err
		}
	}
	if err := x.Faults.Hit(fault.BatchAfterTargets); err != nil {
		return j, rev, err
	}
	x.logger().Info("batch job's targets recorded", slog.String("job", j.ID), slog.Int("targets", total))
	return x.change(ctx, j, rev, Event{Kind: EventResolved, At: x.now(), Total: total, Chunks: chunks, Executor: x.Name})
}

// change writes Next(j, ev) at revision rev. After a conflict it reads the job again: a stop
// request is merged and the write tried again; a job another executor advanced, or that ended,
// is ErrLost (or nil, returning it, for a job that ended).
func (x *Executor) change(ctx context.Context, j Job, rev uint64, ev Event) (Job, uint64, error) {
	for {
		next, err := Next(j, ev)
		if err != nil {
			return j, rev, err
		}
		r, err := x.Store.Update(ctx, next, rev)
		if err == nil {
			return next, r, nil
		}
		if !errors.Is(err, ErrConflict) {
			return j, rev, err
		}
		cur, crev, err := x.Store.Get(ctx, j.ID)
		if err != nil {
			return j, rev, err
		}
		if cur.State != j.State || cur.Cursor != j.Cursor {
			if cur.State.Ended() {
				return cur, crev, nil
			}
			return cur, crev, fmt.Errorf("%w: job %q is %s at %d, this executor was at %d", ErrLost, j.ID, cur.State, cur.Cursor, j.Cursor)
		}
		// Only the stop request can have changed: keep it, and record this window's results.
		j, rev = cur, crev
	}
}

func (x *Executor) failed(ctx context.Context, j Job, rev uint64, why string) (Job, uint64, error) {
	x.logger().Warn("batch job failed", slog.String("job", j.ID), slog.String("error", why))
	return x.change(ctx, j, rev, Event{Kind: EventFailed, At: x.now(), Reason: why, Executor: x.Name})
}

func (x *Executor) fail(ctx context.Context, j Job, rev uint64, why string) error {
	_, _, err := x.failed(ctx, j, rev, why)
	return err
}

// apply applies j's operation to the window's targets, each after taking a token of the rate
// bucket, with up to Concurrency in flight, and returns their results in order: of all of
// them, or of those it started within WindowTime (at least one). An injected fault (the
// process dying mid-window) ends it with the error, after the operations in flight returned.
func (x *Executor) apply(ctx context.Context, j *Job, runIDs []string, bucket *Bucket) ([]Result, error) {
	conc := x.Concurrency
	if conc <= 0 {
		conc = 16
	}
	op := Operations[j.Spec.Op]
	results := make([]Result, len(runIDs))
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	stop := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	span := x.WindowTime
	if span <= 0 {
		span = time.Second
	}
	began, launched := time.Now(), 0
	for i, runID := range runIDs {
		if i > 0 && time.Since(began) >= span {
			break
		}
		if d := bucket.Take(x.now()); d > 0 {
			wait.For(ctx, d)
		}
		if ctx.Err() != nil || failed() {
			break
		}
		launched++
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t := Target{JobID: j.ID, RunID: runID, DeliveryID: DeliveryID(j.ID, runID), Spec: &j.Spec}
			results[i] = x.one(ctx, op, t)
			if err := x.Faults.Hit(fault.BatchAfterOp); err != nil {
				stop(err)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results[:launched], nil
}

// one applies op to t, trying a transient failure again, and says what it did.
func (x *Executor) one(ctx context.Context, op Operation, t Target) Result {
	attempts := x.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		to, err := op(ctx, x.Engine, t)
		o, reason, retry := classify(err)
		if retry && attempt < attempts && ctx.Err() == nil {
			wait.For(ctx, backoff)
			backoff *= 2
			continue
		}
		if o == Skipped && errors.Is(err, core.ErrTerminal) {
			reason = x.endedAs(ctx, to, t.RunID)
		}
		return Result{RunID: t.RunID, Outcome: o, Reason: reason}
	}
}

// endedAs says how a target that refused the operation because it ended, ended: "already
// <status>" of the run that refused it (the latest of its continuations).
func (x *Executor) endedAs(ctx context.Context, to, runID string) string {
	if to == "" {
		to = runID
	}
	s, err := x.Engine.Snapshot(ctx, to)
	if err != nil || s.Outcome == nil {
		return "already ended"
	}
	return "already " + string(s.Status)
}

func (x *Executor) logger() *slog.Logger {
	if x.Logger == nil {
		return slog.Default()
	}
	return x.Logger
}
