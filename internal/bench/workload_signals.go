package bench

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// W5, W7 and W8: runs suspended on a signal.

// since returns a lower bound of the start times the runs index will record for runs started
// from now on, and above those of the runs started before: Flow records times at full
// precision from this machine's clock.
func since() time.Time { return time.Now() }

// startSuspended starts n runs of definition with input(i) from 64 goroutines and waits until
// the runs index shows them all suspended. It returns their IDs, and a time at or before their
// start for filtering the runs index.
func (r *rep) startSuspended(n int, definition string, input func(i int) any) ([]string, time.Time, error) {
	from := since()
	ids := make([]string, n)
	if err := parallel(r.ctx, n, func(i int) error {
		id, err := r.st.client.Start(r.ctx, definition, input(i), nil)
		ids[i] = id
		return err
	}); err != nil {
		return nil, from, fmt.Errorf("starting %s: %w", definition, err)
	}
	return ids, from, r.st.awaitRuns(r.ctx, definition, from, flow.StatusSuspended, n)
}

// resumed is the outcome of signalling suspended runs.
type resumed struct {
	signalled []time.Time // when each run's Signal call started
	lastSent  time.Time   // when the last Signal call returned
	done      []time.Time // when each run's Result returned
}

// signalAll waits for every run's result from a goroutine per run, and meanwhile signals run i
// from 64 goroutines with payload i; its result must be want(i).
func (r *rep) signalAll(ids []string, want func(i int) int) (*resumed, error) {
	res := &resumed{signalled: make([]time.Time, len(ids)), done: make([]time.Time, len(ids))}
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			if err := r.expect(id, want(i)); err != nil {
				errs <- err
				return
			}
			res.done[i] = time.Now()
		})
	}
	var mu sync.Mutex
	err := parallel(r.ctx, len(ids), func(i int) error {
		t0 := time.Now()
		if _, err := r.st.client.Signal(r.ctx, ids[i], signalName, i, nil); err != nil {
			return fmt.Errorf("signalling %s: %w", ids[i], err)
		}
		t1 := time.Now()
		res.signalled[i] = t0
		mu.Lock()
		if t1.After(res.lastSent) {
			res.lastSent = t1
		}
		mu.Unlock()
		return nil
	})
	wg.Wait() // the results end with ctx at the latest
	close(errs)
	if err != nil {
		return nil, err
	}
	if err := <-errs; err != nil {
		return nil, err
	}
	return res, nil
}

// runW5: r.n runs suspended on a signal (confirmed in the runs index); 64 goroutines signal
// them; total_s from the last Signal call returning until every Result returned.
func runW5(r *rep) (map[string]float64, error) {
	ids, _, err := r.startSuspended(r.n, defAwait, func(int) any { return nil })
	if err != nil {
		return nil, err
	}
	r.begin()
	res, err := r.signalAll(ids, func(i int) int { return i })
	if err != nil {
		return nil, err
	}
	r.end()
	return map[string]float64{"total_s": latest(res.done).Sub(res.lastSent).Seconds()}, nil
}

// w8Steps gives W8's runs 200 events before the signal: run.started, 99 steps of
// step.scheduled and step.completed, signal.awaited.
const w8Steps = 99

// runW8: r.n runs of 200 events each, run concurrently so that their commits interleave in the
// stream, suspended on a signal; then a new worker (empty cache) resumes them all (64
// goroutines signal them). A run's resume time is the recorded time of its run.completed minus
// the start of its Signal call; total_s runs from the first Signal call to the last
// run.completed. Completion is watched in the runs index, not with a Client.Result per run, so
// that a thousand concurrent awaits do not load the history service while it is measured.
func runW8(r *rep) (map[string]float64, error) {
	ids, from, err := r.startSuspended(r.n, defSeq, func(i int) any { return seqInput{Steps: w8Steps, Start: 0, Await: true} })
	if err != nil {
		return nil, err
	}
	snap, err := r.st.client.Snapshot(r.ctx, ids[0])
	if err != nil {
		return nil, err
	}
	if snap.Seq != 200 {
		r.st.logger.Warn("W8: a suspended run does not have 200 events", "run", ids[0], "events", snap.Seq)
	}
	if err := r.st.restartWorker(r.ctx); err != nil {
		return nil, err
	}
	signalled := make([]time.Time, len(ids))
	r.begin()
	if err := parallel(r.ctx, len(ids), func(i int) error {
		signalled[i] = time.Now()
		if _, err := r.st.client.Signal(r.ctx, ids[i], signalName, i, nil); err != nil {
			return fmt.Errorf("signalling %s: %w", ids[i], err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := r.st.awaitRuns(r.ctx, defSeq, from, flow.StatusCompleted, len(ids)); err != nil {
		return nil, err
	}
	r.end()
	done := make([]time.Time, len(ids))
	if err := parallel(r.ctx, len(ids), func(i int) error {
		s, err := r.st.client.Snapshot(r.ctx, ids[i])
		if err != nil {
			return err
		}
		if s.Status != flow.StatusCompleted {
			return fmt.Errorf("run %s: %s, want completed", ids[i], s.Status)
		}
		done[i] = s.UpdatedAt
		return nil
	}); err != nil {
		return nil, err
	}
	lat := make([]time.Duration, len(ids))
	for i := range ids {
		lat[i] = done[i].Sub(signalled[i])
	}
	m := latencies("", lat)
	m["total_s"] = latest(done).Sub(earliest(signalled)).Seconds()
	return m, nil
}

func earliest(ts []time.Time) time.Time {
	e := ts[0]
	for _, t := range ts {
		if t.Before(e) {
			e = t
		}
	}
	return e
}

// flowMem is this process's goroutines, live heap (after a GC) and resident memory.
func flowMem() (goroutines int, heapMiB, rssMiB float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	goroutines = runtime.NumGoroutine()
	if m, err := readMem(os.Getpid()); err == nil {
		rssMiB = mib(m.RSS)
	}
	return goroutines, float64(ms.HeapAlloc) / (1 << 20), rssMiB
}

// runW7: the Flow process idle (a new worker, empty cache), then with r.n runs suspended on
// signals (confirmed in the runs index): goroutines, live heap and RSS, and the stream bytes
// per suspended run.
func runW7(r *rep) (map[string]float64, error) {
	if err := r.st.restartWorker(r.ctx); err != nil {
		return nil, err
	}
	_, bytesBefore, err := r.st.streamTotals(r.ctx)
	if err != nil {
		return nil, err
	}
	gIdle, heapIdle, rssIdle := flowMem()
	t0 := time.Now()
	if _, _, err := r.startSuspended(r.n, defAwait, func(int) any { return nil }); err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	gSusp, heapSusp, rssSusp := flowMem()
	_, bytesAfter, err := r.st.streamTotals(r.ctx)
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"goroutines_idle": float64(gIdle), "goroutines_suspended": float64(gSusp),
		"heap_idle_mib": heapIdle, "heap_suspended_mib": heapSusp,
		"rss_idle_mib": rssIdle, "rss_suspended_mib": rssSusp,
		"nats_bytes_per_run": float64(int64(bytesAfter)-int64(bytesBefore)) / float64(r.n),
		"total_s":            secs,
	}, nil
}
