package bench

import (
	"fmt"
	"strconv"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// The update round trip: Client.Update with Wait, from the call to the result, on a warm
// worker (docs/updates.md).

// updateBump is the update of defAwait runs that the update workload sends: its handler
// completes it at once with the payload plus one.
const updateBump = "bump"

// updateRuns is how many runs the update workload spreads its updates over: one per client
// goroutine, so that the concurrent phase measures the engine, not 64 writers contending for a
// few runs' sequences, and no run's history grows long.
const updateRuns = clients

func registerUpdates(reg *flow.Registry) {
	flow.RegisterUpdate(reg, defAwait, updateBump, flow.UpdateHandler[int]{
		Complete: func(_ *flow.Context, _ *flow.Update, n int) (any, error) { return n + 1, nil },
	})
}

// runUpdates: updateRuns runs suspended on a signal (confirmed in the runs index) receive r.n
// updates one after another, round robin, each sent with Client.Update (Wait) and completed at
// once by the workflow's handler: p50_ms and p99_ms from the call to its result. Then the same
// number from 64 goroutines at once: updates_per_s. The runs are then signalled and complete.
func runUpdates(r *rep) (map[string]float64, error) {
	ids, _, err := r.startSuspended(updateRuns, defAwait, func(int) any { return nil })
	if err != nil {
		return nil, err
	}
	update := func(i int) error {
		out, err := r.st.client.Update(r.ctx, ids[i%len(ids)], updateBump, i, &flow.UpdateOptions{Wait: true})
		if err != nil {
			return fmt.Errorf("update %d of run %s: %w", i, ids[i%len(ids)], err)
		}
		if got := string(out.Result); got != strconv.Itoa(i+1) {
			return fmt.Errorf("update %d of run %s returned %s, want %d", i, ids[i%len(ids)], got, i+1)
		}
		return nil
	}
	r.begin()
	lat := make([]time.Duration, r.n)
	for i := range r.n {
		t0 := time.Now()
		if err := update(i); err != nil {
			return nil, err
		}
		lat[i] = time.Since(t0)
	}
	t0 := time.Now()
	if err := parallel(r.ctx, r.n, update); err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	r.end()
	if _, err := r.signalAll(ids, func(i int) int { return i }); err != nil {
		return nil, err
	}
	m := latencies("", lat)
	m["updates_per_s"] = float64(r.n) / elapsed.Seconds()
	return m, nil
}
