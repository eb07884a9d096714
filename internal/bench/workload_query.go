package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// Q1: query latency on a warm worker.

// defQuery waits for the signal "go", counting the decisions it made, and answers the query
// "decisions" from inside its code (flow.HandleQuery) and "status" from the snapshot
// (flow.RegisterQuery); with queryInput.Hold it first runs a step that holds: Q1.
const defQuery = "bench-query"

// queryInput makes a defQuery run hold first: its step "hold" runs until the bench releases
// the hold of that name.
type queryInput struct {
	Hold string `json:"hold,omitempty"`
}

// queryWorkflow declares its query handler, runs its hold step if it has one, then waits for
// the signal.
func queryWorkflow(ctx *flow.Context, in queryInput) (flow.Decision, error) {
	decisions := ctx.Snapshot().Progress.Decisions
	flow.HandleQuery(ctx, "decisions", func(struct{}) (int, error) { return decisions, nil })
	if in.Hold != "" && ctx.StepOutput("hold") == nil {
		return ctx.ScheduleStep("hold", stepHold, in.Hold), nil
	}
	if v, ok, err := flow.SignalValue[int](ctx, signalName); err != nil || ok {
		return ctx.Complete(v), err
	}
	return ctx.AwaitSignal(signalName, signalName), nil
}

// stepHold runs until the hold it names is released (or the worker stops).
const stepHold = "hold"

// holds are the channels that release hold steps, by name.
var holds sync.Map

func hold(ctx context.Context, name string) (string, error) {
	ch, _ := holds.LoadOrStore(name, make(chan struct{}))
	select {
	case <-ch.(chan struct{}):
		return name, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// queryStatus answers defQuery's "status" query from the snapshot.
func queryStatus(ctx *flow.Context, _ struct{}) (flow.Status, error) {
	return ctx.Snapshot().Status, nil
}

// registerQueries adds Q1's definition and query to reg.
func registerQueries(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, defQuery, queryWorkflow)
	flow.RegisterQuery(reg, defQuery, "status", queryStatus)
	flow.RegisterStep(reg, stepHold, hold)
}

// runQ1: one run suspended on a signal, held warm by the worker that drove it; r.n queries of
// "status" (flow.RegisterQuery: answered from the snapshot), then r.n of "decisions"
// (flow.HandleQuery: the workflow function evaluated on the snapshot in query mode), one at a
// time, each timed from Client.Query's call to its return: the client's request to the worker,
// the copy of the cached snapshot, the handler and the reply. p50_ms and p99_ms are the
// "status" queries', handle_p50_ms and handle_p99_ms the "decisions" ones'. The run is then
// signalled and completes. step_p50_ms and step_p99_ms are those of r.n "status" queries of
// another run while its step runs, answered from the copy its driver hands over.
func runQ1(r *rep) (map[string]float64, error) {
	ids, _, err := r.startSuspended(1, defQuery, func(int) any { return nil })
	if err != nil {
		return nil, err
	}
	id := ids[0]
	ask := func(name string, check func() error, into any) ([]time.Duration, error) {
		lat := make([]time.Duration, 0, r.n)
		for range r.n {
			t0 := time.Now()
			if err := r.st.client.Query(r.ctx, id, name, nil, into); err != nil {
				return nil, fmt.Errorf("query %q of %s: %w", name, id, err)
			}
			lat = append(lat, time.Since(t0))
			if err := check(); err != nil {
				return nil, err
			}
		}
		return lat, nil
	}
	var status flow.Status
	var decisions int
	r.begin()
	statusLat, err := ask("status", func() error {
		if status != flow.StatusSuspended {
			return fmt.Errorf("query status of %s: %s, want suspended", id, status)
		}
		return nil
	}, &status)
	if err != nil {
		return nil, err
	}
	handleLat, err := ask("decisions", func() error {
		if decisions != 1 {
			return fmt.Errorf("query decisions of %s: %d, want 1", id, decisions)
		}
		return nil
	}, &decisions)
	if err != nil {
		return nil, err
	}
	r.end()
	if _, err := r.st.client.Signal(r.ctx, id, signalName, 1, nil); err != nil {
		return nil, fmt.Errorf("signalling %s: %w", id, err)
	}
	if err := r.expect(id, 1); err != nil {
		return nil, err
	}
	m := latencies("", statusLat)
	for k, v := range latencies("handle_", handleLat) {
		m[k] = v
	}
	stepLat, err := r.queryDuringStep()
	if err != nil {
		return nil, err
	}
	for k, v := range latencies("step_", stepLat) {
		m[k] = v
	}
	return m, nil
}

// queryDuringStep starts a defQuery run whose step holds, asks r.n "status" queries while the
// step runs (the run's driver hands each a copy of its snapshot), then releases the step.
func (r *rep) queryDuringStep() ([]time.Duration, error) {
	name := fmt.Sprintf("q1-%d", time.Now().UnixNano())
	ch := make(chan struct{})
	holds.Store(name, ch)
	defer holds.Delete(name)
	id, err := r.st.client.Start(r.ctx, defQuery, queryInput{Hold: name}, nil)
	if err != nil {
		close(ch)
		return nil, err
	}
	var status flow.Status
	for status != flow.StatusRunning {
		if err := r.st.client.Query(r.ctx, id, "status", nil, &status); err != nil {
			close(ch)
			return nil, fmt.Errorf("query status of %s: %w", id, err)
		}
	}
	lat := make([]time.Duration, 0, r.n)
	for range r.n {
		t0 := time.Now()
		if err := r.st.client.Query(r.ctx, id, "status", nil, &status); err != nil {
			close(ch)
			return nil, fmt.Errorf("query status of %s: %w", id, err)
		}
		lat = append(lat, time.Since(t0))
		if status != flow.StatusRunning {
			close(ch)
			return nil, fmt.Errorf("query status of %s: %s while its step runs, want running", id, status)
		}
	}
	close(ch)
	if _, err := r.st.client.Signal(r.ctx, id, signalName, 2, nil); err != nil {
		return nil, fmt.Errorf("signalling %s: %w", id, err)
	}
	return lat, r.expect(id, 2)
}
