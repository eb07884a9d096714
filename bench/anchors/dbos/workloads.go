package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// clients is the number of client goroutines that start runs, wait for results and send
// signals in W2, W3, W5 and W7, as the shared plan defines.
const clients = 64

// env is what one repetition of a workload runs against.
type env struct {
	ctx   dbos.Context
	be    *backend
	sizes sizes
	name  string // workload name, the prefix of its workflow IDs
	rep   int    // 0 for the warm-up, then 1, 2, 3
}

// id names run i of this repetition; every repetition's runs share the prefix of prefix().
func (e *env) id(i int) string { return fmt.Sprintf("%s%d", e.prefix(), i) }
func (e *env) prefix() string  { return fmt.Sprintf("%s-%d-", e.name, e.rep) }

// runW1 runs sizes.w1 ten-step workflows one at a time; latency is RunWorkflow until
// GetResult returned.
func runW1(e *env) (metrics, error) {
	lat := make([]time.Duration, e.sizes.w1)
	for i := range lat {
		t0 := time.Now()
		h, err := dbos.RunWorkflow(e.ctx, chain, 10, dbos.WithWorkflowID(e.id(i)))
		if err != nil {
			return nil, err
		}
		if err := expect(h.GetResult())(10); err != nil {
			return nil, err
		}
		lat[i] = time.Since(t0)
	}
	return metrics{"p50_ms": percentileMs(lat, 0.5), "p99_ms": percentileMs(lat, 0.99)}, nil
}

// runW2 starts sizes.w2 ten-step workflows from 64 goroutines, then waits for all of them from
// 64 goroutines. events_per_s counts DBOS's durable writes: the step checkpoints found in
// operation_outputs plus two workflow_status writes per workflow (its insert at start and its
// outcome at the end), DBOS's counterpart of Flow's history events.
func runW2(e *env) (metrics, error) {
	n := e.sizes.w2
	handles := make([]dbos.WorkflowHandle[int], n)
	t0 := time.Now()
	err := parallel(n, clients, func(i int) error {
		h, err := dbos.RunWorkflow(e.ctx, chain, 10, dbos.WithWorkflowID(e.id(i)))
		handles[i] = h
		return err
	})
	if err != nil {
		return nil, err
	}
	err = parallel(n, clients, func(i int) error { return expect(handles[i].GetResult())(10) })
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(t0).Seconds()
	steps, err := e.be.countSteps(context.Background(), e.prefix(), "inc")
	if err != nil {
		return nil, err
	}
	if steps != 10*n {
		return nil, fmt.Errorf("W2: %d step checkpoints, want %d", steps, 10*n)
	}
	return metrics{
		"wf_per_s":     float64(n) / elapsed,
		"events_per_s": float64(steps+2*n) / elapsed,
	}, nil
}

// runW3 starts n workflows that each sleep sizes.sleep, from 64 goroutines. A run's deadline is
// the one DBOS recorded for its sleep (the output of its "DBOS.sleep" step, which is what the
// sleep waits for); lateness is the time the sleep returned minus that deadline, and resume
// lateness the time GetResult returned minus it.
func runW3(e *env, n int) (metrics, error) {
	type run struct {
		fired, done time.Time
		err         error
	}
	runs := make([]run, n)
	var wg sync.WaitGroup
	err := parallel(n, clients, func(i int) error {
		h, err := dbos.RunWorkflow(e.ctx, sleeper, e.sizes.sleep, dbos.WithWorkflowID(e.id(i)))
		if err != nil {
			return err
		}
		wg.Go(func() {
			v, err := h.GetResult()
			runs[i] = run{fired: time.Unix(0, v), done: time.Now(), err: err}
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	wg.Wait()
	late := make([]time.Duration, n)
	resume := make([]time.Duration, n)
	err = parallel(n, 16, func(i int) error {
		if runs[i].err != nil {
			return runs[i].err
		}
		deadline, err := sleepDeadline(e.ctx, e.id(i))
		if err != nil {
			return err
		}
		late[i] = runs[i].fired.Sub(deadline)
		resume[i] = runs[i].done.Sub(deadline)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return metrics{
		"lateness_p50_ms":        percentileMs(late, 0.5),
		"lateness_p99_ms":        percentileMs(late, 0.99),
		"resume_lateness_p50_ms": percentileMs(resume, 0.5),
		"resume_lateness_p99_ms": percentileMs(resume, 0.99),
	}, nil
}

// runW4 runs one workflow that starts sizes.w4 steps at once (dbos.Go) and completes when all
// are done; total_s is RunWorkflow until GetResult returned.
func runW4(e *env) (metrics, error) {
	t0 := time.Now()
	h, err := dbos.RunWorkflow(e.ctx, fanout, e.sizes.w4, dbos.WithWorkflowID(e.id(0)))
	if err != nil {
		return nil, err
	}
	if err := expect(h.GetResult())(e.sizes.w4); err != nil {
		return nil, err
	}
	return metrics{"total_s": time.Since(t0).Seconds()}, nil
}

// runW5 starts sizes.w5 workflows waiting in dbos.Recv, waits until every one has checkpointed
// its receive deadline (registered as a receiver and waiting), then sends the signals from 64
// goroutines with dbos.Send; total_s is the moment the last Send returned until the last
// GetResult returned (zero when every run was done before the last Send returned).
func runW5(e *env) (metrics, error) {
	n := e.sizes.w5
	done := make([]time.Time, n)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	err := parallel(n, clients, func(i int) error {
		h, err := dbos.RunWorkflow(e.ctx, waiter, 0, dbos.WithWorkflowID(e.id(i)))
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := expect(h.GetResult())("go"); err != nil {
				failed.Store(&err)
			}
			done[i] = time.Now()
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := e.awaitSuspended(n, time.Minute, 10*time.Millisecond); err != nil {
		return nil, err
	}
	var lastSend atomic.Int64
	err = parallel(n, clients, func(i int) error {
		if err := dbos.Send(e.ctx, e.id(i), "go", signalTopic); err != nil {
			return err
		}
		storeMax(&lastSend, time.Now().UnixNano())
		return nil
	})
	if err != nil {
		return nil, err
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return nil, *p
	}
	last := slices.MaxFunc(done, func(a, b time.Time) int { return a.Compare(b) })
	total := max(0, last.Sub(time.Unix(0, lastSend.Load())))
	return metrics{"total_s": total.Seconds()}, nil
}

// runW6 runs one workflow of sizes.w6 sequential steps. From the time each step started
// (stepMarks, monotonic clock), the time per step over the first 100 steps is
// (start[100] - start[0]) / 100 and over the last 100 (start[n-1] - start[n-101]) / 100: each
// interval is one step's execution and checkpoint write plus the workflow's way to the next.
func runW6(e *env) (metrics, error) {
	n := e.sizes.w6
	if n < 201 {
		return nil, fmt.Errorf("W6 needs at least 201 steps, not %d", n)
	}
	marks := make([]time.Time, n)
	stepMarks.Store(&marks)
	defer stepMarks.Store(nil)
	t0 := time.Now()
	h, err := dbos.RunWorkflow(e.ctx, chain, n, dbos.WithWorkflowID(e.id(0)))
	if err != nil {
		return nil, err
	}
	if err := expect(h.GetResult())(n); err != nil {
		return nil, err
	}
	total := time.Since(t0)
	first := ms(marks[100].Sub(marks[0])) / 100
	last := ms(marks[n-1].Sub(marks[n-101])) / 100
	return metrics{
		"total_s":              total.Seconds(),
		"first100_ms_per_step": first,
		"last100_ms_per_step":  last,
		"ratio":                last / first,
	}, nil
}

// runW7 measures the DBOS process idle (launched, no workflow), then with sizes.w7 workflows
// suspended in dbos.Recv: goroutines, live heap after a GC, and resident memory. The harness
// keeps no handle or goroutine per run while it measures; afterwards it signals every run and
// waits until all are done, untimed.
func runW7(e *env) (metrics, error) {
	n := e.sizes.w7
	idle := sampleRuntime()
	err := parallel(n, clients, func(i int) error {
		_, err := dbos.RunWorkflow(e.ctx, waiter, 0, dbos.WithWorkflowID(e.id(i)))
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := e.awaitSuspended(n, 30*time.Minute, time.Second); err != nil {
		return nil, err
	}
	suspended := sampleRuntime()
	err = parallel(n, clients, func(i int) error { return dbos.Send(e.ctx, e.id(i), "go", signalTopic) })
	if err != nil {
		return nil, err
	}
	err = waitFor(30*time.Minute, time.Second, func() (bool, error) {
		c, err := e.be.countSteps(context.Background(), e.prefix(), "DBOS.recv")
		return c == n, err
	})
	if err != nil {
		return nil, fmt.Errorf("W7: waiting for the signalled runs: %w", err)
	}
	return metrics{
		"goroutines_idle":      float64(idle.goroutines),
		"goroutines_suspended": float64(suspended.goroutines),
		"heap_idle_mib":        idle.heapMiB,
		"heap_suspended_mib":   suspended.heapMiB,
		"rss_idle_mib":         idle.rssMiB,
		"rss_suspended_mib":    suspended.rssMiB,
	}, nil
}

// awaitSuspended polls until the n runs of this repetition have each checkpointed the deadline
// of their Recv ("DBOS.sleep"), which DBOS writes after registering the receiver and just
// before waiting.
func (e *env) awaitSuspended(n int, timeout, interval time.Duration) error {
	var got int
	err := waitFor(timeout, interval, func() (bool, error) {
		c, err := e.be.countSteps(context.Background(), e.prefix(), "DBOS.sleep")
		got = c
		return c == n, err
	})
	if err != nil {
		return fmt.Errorf("%s: %d of %d runs suspended: %w", e.name, got, n, err)
	}
	return nil
}

type runtimeSample struct {
	goroutines      int
	heapMiB, rssMiB float64
}

// sampleRuntime collects garbage, then reads this process's goroutines, live heap and RSS.
func sampleRuntime() runtimeSample {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s := runtimeSample{goroutines: runtime.NumGoroutine(), heapMiB: round(float64(m.HeapAlloc) / (1 << 20))}
	if kb, err := statusKiB(selfPID, "VmRSS"); err == nil {
		s.rssMiB = round(float64(kb) / 1024)
	}
	return s
}

// sleepDeadline returns the deadline DBOS recorded for the sleep of workflow id.
func sleepDeadline(ctx dbos.Context, id string) (time.Time, error) {
	steps, err := dbos.GetWorkflowSteps(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	for _, s := range steps {
		if s.StepName != "DBOS.sleep" {
			continue
		}
		// The step's output is the deadline in Unix milliseconds; with DBOS's default JSON
		// serializer GetWorkflowSteps returns it as its JSON text.
		if v, ok := s.Output.(string); ok {
			if msec, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.UnixMilli(msec), nil
			}
		}
		// Sleep also records the deadline as the step's completion time.
		if !s.CompletedAt.IsZero() {
			return s.CompletedAt, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: no recorded sleep deadline", id)
}

// expect turns a GetResult into a check of its value.
func expect[R comparable](got R, err error) func(want R) error {
	return func(want R) error {
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("result %v, want %v", got, want)
		}
		return nil
	}
}

// parallel calls fn(0..n-1) from at most workers goroutines and returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for first.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// waitFor polls cond every interval until it holds, fails, or timeout passes.
func waitFor(timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %s", timeout)
		}
		time.Sleep(interval)
	}
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
