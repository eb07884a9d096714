package bench

import (
	"fmt"
	"sync"
	"time"
)

// W9: inputs through the ingress.

// w9PerRun is how many of W9's signals each run receives: under the ingress's per-run rate
// burst (200), so that W9 measures the ingress, not its rate limit.
const w9PerRun = 10

// w9Signal names W9's signals; bench-await never consumes them, so each is one commit
// (signal.received) and the worker's decision that the run still waits.
const w9Signal = "w9"

// runW9: r.n signals to r.n/10 runs suspended on another signal (confirmed in the runs index),
// sent from 64 goroutines, run i%runs getting signal i; inputs_per_s is r.n over the time from
// the first Signal call to the last one returning, and p50_ms, p99_ms the calls' latency
// (each returns once its signal.received is committed).
func runW9(r *rep) (map[string]float64, error) {
	runs := max(1, r.n/w9PerRun)
	ids, _, err := r.startSuspended(runs, defAwait, func(int) any { return nil })
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, r.n)
	var mu sync.Mutex
	var last time.Time
	r.begin()
	first := time.Now()
	err = parallel(r.ctx, r.n, func(i int) error {
		t0 := time.Now()
		if _, err := r.st.client.Signal(r.ctx, ids[i%runs], w9Signal, i, nil); err != nil {
			return fmt.Errorf("signalling %s: %w", ids[i%runs], err)
		}
		t1 := time.Now()
		lat[i] = t1.Sub(t0)
		mu.Lock()
		if t1.After(last) {
			last = t1
		}
		mu.Unlock()
		return nil
	})
	r.end()
	if err != nil {
		return nil, err
	}
	m := latencies("", lat)
	m["inputs_per_s"] = float64(r.n) / last.Sub(first).Seconds()
	return m, nil
}
