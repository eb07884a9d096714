package bench

import (
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// sleepMillis is how long W3's runs sleep.
const sleepMillis = 2000

// runW3: r.n runs sleeping 2 s, started at once from 64 goroutines. Lateness is the recorded
// time of wait.fired minus the deadline wait.scheduled recorded; resume lateness the recorded
// time of run.completed minus the deadline.
func runW3(r *rep) (map[string]float64, error) {
	ids := make([]string, r.n)
	r.begin()
	if err := parallel(r.ctx, r.n, func(i int) error {
		id, err := r.st.client.Start(r.ctx, defSleep, sleepInput{Millis: sleepMillis}, nil)
		ids[i] = id
		return err
	}); err != nil {
		return nil, fmt.Errorf("starting: %w", err)
	}
	if err := parallel(r.ctx, r.n, func(i int) error { return r.expect(ids[i], sleepMillis) }); err != nil {
		return nil, err
	}
	r.end()
	late := make([]time.Duration, r.n)
	resumeLate := make([]time.Duration, r.n)
	if err := parallel(r.ctx, r.n, func(i int) error {
		hist, err := r.st.client.History(r.ctx, ids[i], 0)
		if err != nil {
			return fmt.Errorf("history of %s: %w", ids[i], err)
		}
		var deadline, fired, completed time.Time
		for _, e := range hist {
			switch p := e.Payload.(type) {
			case *event.WaitScheduled:
				deadline = p.Deadline
			case *event.WaitFired:
				fired = e.Time
			case *event.RunCompleted:
				completed = e.Time
			}
		}
		if deadline.IsZero() || fired.IsZero() || completed.IsZero() {
			return fmt.Errorf("run %s: its history lacks wait.scheduled, wait.fired or run.completed", ids[i])
		}
		late[i], resumeLate[i] = fired.Sub(deadline), completed.Sub(deadline)
		return nil
	}); err != nil {
		return nil, err
	}
	m := latencies("lateness_", late)
	for k, v := range latencies("resume_lateness_", resumeLate) {
		m[k] = v
	}
	return m, nil
}
