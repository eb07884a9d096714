package bench

import (
	"fmt"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// Q1: query latency on a warm worker.

// defQuery waits for the signal "go", counting the decisions it made, and answers the query
// "decisions" from inside its code (flow.HandleQuery) and "status" from the snapshot
// (flow.RegisterQuery): Q1.
const defQuery = "bench-query"

// queryWorkflow declares its query handler, then waits for the signal.
func queryWorkflow(ctx *flow.Context, _ any) (flow.Decision, error) {
	decisions := ctx.Snapshot().Progress.Decisions
	flow.HandleQuery(ctx, "decisions", func(struct{}) (int, error) { return decisions, nil })
	if v, ok, err := flow.SignalValue[int](ctx, signalName); err != nil || ok {
		return ctx.Complete(v), err
	}
	return ctx.AwaitSignal(signalName, signalName), nil
}

// queryStatus answers defQuery's "status" query from the snapshot.
func queryStatus(ctx *flow.Context, _ struct{}) (flow.Status, error) {
	return ctx.Snapshot().Status, nil
}

// registerQueries adds Q1's definition and query to reg.
func registerQueries(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, defQuery, queryWorkflow)
	flow.RegisterQuery(reg, defQuery, "status", queryStatus)
}

// runQ1: one run suspended on a signal, held warm by the worker that drove it; r.n queries of
// "status" (flow.RegisterQuery: answered from the snapshot), then r.n of "decisions"
// (flow.HandleQuery: the workflow function evaluated on the snapshot in query mode), one at a
// time, each timed from Client.Query's call to its return: the client's request to the worker,
// the copy of the cached snapshot, the handler and the reply. p50_ms and p99_ms are the
// "status" queries', handle_p50_ms and handle_p99_ms the "decisions" ones'. The run is then
// signalled and completes.
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
	return m, nil
}
