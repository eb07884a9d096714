package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/pkg/event"
)

// W1, W2, W4 and W6: runs of steps.

// seqSteps is the length of W1's and W2's workflow.
const seqSteps = 10

// runSeq starts a bench-seq run of steps steps from start and waits for its result, checking
// it.
func (r *rep) runSeq(start, steps int) (string, error) {
	id, err := r.st.client.Start(r.ctx, defSeq, seqInput{Steps: steps, Start: start}, nil)
	if err != nil {
		return "", fmt.Errorf("starting %s: %w", defSeq, err)
	}
	return id, r.expect(id, start+steps)
}

// expect waits for run id's result and checks it is want.
func (r *rep) expect(id string, want int) error {
	var out int
	if err := r.st.client.Result(r.ctx, id, &out); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	if out != want {
		return fmt.Errorf("run %s: output %d, want %d", id, out, want)
	}
	return nil
}

// msgsPerStep returns the messages written to all streams since before, per step.
func (r *rep) msgsPerStep(before uint64, steps int) (float64, error) {
	after, err := r.st.settledWritten(r.ctx)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(steps), nil
}

// runW1: r.n runs of 10 sequential steps, one at a time; latency from Start to Result.
func runW1(r *rep) (map[string]float64, error) {
	before, _, err := r.st.streamTotals(r.ctx)
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, 0, r.n)
	r.begin()
	for i := range r.n {
		t0 := time.Now()
		if _, err := r.runSeq(i, seqSteps); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	r.end()
	m := latencies("", lat)
	if m["msgs_per_step"], err = r.msgsPerStep(before, r.n*seqSteps); err != nil {
		return nil, err
	}
	return m, nil
}

// runW2: r.n runs of 10 sequential steps at once: started from 64 goroutines, then their results
// awaited from 64.
func runW2(r *rep) (map[string]float64, error) {
	before, _, err := r.st.streamTotals(r.ctx)
	if err != nil {
		return nil, err
	}
	perStreamBefore, err := r.st.streamWritten(r.ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, r.n)
	r.begin()
	t0 := time.Now()
	if err := parallel(r.ctx, r.n, func(i int) error {
		id, err := r.st.client.Start(r.ctx, defSeq, seqInput{Steps: seqSteps, Start: i}, nil)
		ids[i] = id
		return err
	}); err != nil {
		return nil, fmt.Errorf("starting: %w", err)
	}
	if err := parallel(r.ctx, r.n, func(i int) error { return r.expect(ids[i], i+seqSteps) }); err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	r.end()
	// Every run's events: its last sequence.
	events := make([]uint64, r.n)
	if err := parallel(r.ctx, r.n, func(i int) error {
		s, err := r.st.client.Snapshot(r.ctx, ids[i])
		if err == nil {
			events[i] = s.Seq
		}
		return err
	}); err != nil {
		return nil, err
	}
	var total uint64
	for _, e := range events {
		total += e
	}
	m := map[string]float64{
		"wf_per_s":     float64(r.n) / secs,
		"events_per_s": float64(total) / secs,
		"steps_per_s":  float64(r.n*seqSteps) / secs,
	}
	if m["msgs_per_step"], err = r.msgsPerStep(before, r.n*seqSteps); err != nil {
		return nil, err
	}
	perStream, err := r.st.streamWritten(r.ctx)
	if err != nil {
		return nil, err
	}
	// Where the messages went: the history streams (spread over the partitions), and each other
	// stream that took at least one message per 20 steps, which no partitioning spreads
	// (docs/performance.md's projection).
	steps := float64(r.n * seqSteps)
	var history uint64
	for name, n := range perStream {
		n -= perStreamBefore[name]
		if name == streams.History || strings.HasPrefix(name, streams.History+"_") {
			history += n
		} else if per := float64(n) / steps; per >= 0.05 {
			m["msgs_per_step_"+name] = per
		}
	}
	m["history_msgs_per_step"] = float64(history) / steps
	m["runs"] = float64(r.n)
	return m, nil
}

// runW4: one run scheduling one batch of r.n parallel steps; Start until Result.
func runW4(r *rep) (map[string]float64, error) {
	r.begin()
	t0 := time.Now()
	id, err := r.st.client.Start(r.ctx, defFanout, fanoutInput{Steps: r.n}, nil)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", defFanout, err)
	}
	if err := r.expect(id, fanoutSum(r.n)); err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	r.end()
	return map[string]float64{"total_s": secs}, nil
}

// runW6: one run of r.n sequential steps; the time per step over the first and the last 100,
// from the recorded times of the steps' step.completed events.
func runW6(r *rep) (map[string]float64, error) {
	if r.n < 201 {
		return nil, fmt.Errorf("W6 needs more than 200 steps, got %d", r.n)
	}
	before, _, err := r.st.streamTotals(r.ctx)
	if err != nil {
		return nil, err
	}
	r.begin()
	t0 := time.Now()
	id, err := r.runSeq(0, r.n)
	if err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	r.end()
	hist, err := r.st.client.History(r.ctx, id, 0)
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", id, err)
	}
	done := make(map[string]time.Time, r.n)
	for _, e := range hist {
		if c, ok := e.Payload.(*event.StepCompleted); ok {
			done[c.StepID] = e.Time
		}
	}
	at := func(i int) (time.Time, error) {
		t, ok := done[stepID(i)]
		if !ok {
			return t, fmt.Errorf("run %s: no step.completed for %s in its history", id, stepID(i))
		}
		return t, nil
	}
	per100 := func(from, to int) (float64, error) {
		a, err := at(from)
		if err != nil {
			return 0, err
		}
		b, err := at(to)
		if err != nil {
			return 0, err
		}
		return millis(b.Sub(a)) / float64(to-from), nil
	}
	first, err := per100(0, 100)
	if err != nil {
		return nil, err
	}
	last, err := per100(r.n-101, r.n-1)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{
		"first100_ms_per_step": first, "last100_ms_per_step": last, "ratio": last / first,
		"total_s": secs, "steps_per_s": float64(r.n) / secs,
	}
	if m["msgs_per_step"], err = r.msgsPerStep(before, r.n); err != nil {
		return nil, err
	}
	return m, nil
}
