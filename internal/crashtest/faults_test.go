package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
	"github.com/flowrun/flow/services/worker"
)

// TestFaultsBetweenWrites runs a mixed workload (sequential steps, a sleep, a retry, a signal, a
// child, continue-as-new, a hook) with one fault point failing again and again, in every
// process that passes it: workers, the scheduler, the history service and the writer of
// inputs. Each point sits between two durable writes (package fault lists them). Every run
// must still complete with the right output, every history must pass the invariants checker,
// the runs index must equal a fresh projection of history, and no timer entry may be left.
func TestFaultsBetweenWrites(t *testing.T) {
	t.Parallel()
	for _, p := range fault.Points {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			f := &fault.Injector{}
			f.ArmEvery(p, fault.Fail, 2, 8)
			runFaultWorkload(t, f)
			require.Positive(t, f.Hits(p), "the workload never reached %s", p)
		})
	}
}

// faultRuns are the runs of the workload, with their expected outputs (as JSON).
var faultRuns = []struct {
	id, definition, input, want string
}{
	{"seq-1", "seq", `3`, `3`},
	{"seq-2", "seq", `5`, `5`},
	{"nap-1", "doze", `null`, `"rested"`},
	{"flaky-1", "flaky", `null`, `"second time lucky"`},
	{"waiter-1", "waiter", `null`, `"go!"`},
	{"parent-1", "parent", `null`, `2`},
	{"chain-1", "chain", `0`, `2`},
	{"hooked-1", "hooked", `null`, `"called back"`},
	{"tagged-1", "tagged", `7`, `"c-42"`},
	// Under flow control: admitted by the scheduler, its slot released by the history service.
	{"limited-1", "limited", `2`, `2`},
}

// faultStartAttrs are the search attributes workload runs start with, by definition.
var faultStartAttrs = map[string]flow.Attrs{"tagged": {"customer": "c-42"}}

func runFaultWorkload(t *testing.T, f *fault.Injector) {
	srv := natstest.RunJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	reg := faultRegistry()
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", AckWait: time.Second, Logger: natstest.Logger(), Faults: f})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: natstest.Logger()})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), AckWait: 2 * time.Second, Logger: natstest.Logger(), Faults: f}, reg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	s, err := scheduler.New(scheduler.Config{Conn: natstest.Connect(t, srv), Logger: natstest.Logger(), Faults: f})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	inputs := inputEngine(t, natstest.JetStream(t, srv), f)
	client := newBareClient(t, srv)
	startWorkload(t, ctx, reg, inputs, 1)
	sendWorkloadInputs(t, ctx, inputs, 1)
	awaitWorkload(t, ctx, client, 1)
	requireConsistent(t, ctx, natstest.JetStream(t, srv), client)
}

// workloadID names copy k of a workload run.
func workloadID(id string, k int) string { return fmt.Sprintf("%s-%d", id, k) }

// startWorkload starts copies of each workload run through inputs.
func startWorkload(t *testing.T, ctx context.Context, reg *flow.Registry, inputs *engine.Engine, copies int) {
	t.Helper()
	for k := range copies {
		for _, r := range faultRuns {
			spec, err := sdk.RuntimeOf(reg).Spec(r.definition, json.RawMessage(r.input))
			require.NoError(t, err)
			attrs, err := sdk.RuntimeOf(reg).StartAttributes(r.definition, faultStartAttrs[r.definition])
			require.NoError(t, err)
			control, err := limits.Resolve(r.definition, sdk.RuntimeOf(reg).FlowControl(r.definition), nil, json.RawMessage(r.input))
			require.NoError(t, err)
			retry(t, ctx, func() error {
				_, _, err := inputs.Start(ctx, engine.StartParams{RunID: workloadID(r.id, k), Spec: spec, Input: json.RawMessage(r.input),
					Attributes: attrs, Control: control})
				return err
			})
		}
	}
}

// sendWorkloadInputs sends, through inputs, the signals and hook deliveries the workload's runs
// wait for: it needs a worker, to create the hooks.
func sendWorkloadInputs(t *testing.T, ctx context.Context, inputs *engine.Engine, copies int) {
	t.Helper()
	for k := range copies {
		retry(t, ctx, func() error {
			_, err := inputs.Signal(ctx, workloadID("waiter-1", k), "go", json.RawMessage(`"go!"`), "signal-1")
			return err
		})
		retry(t, ctx, func() error {
			s, err := inputs.Snapshot(ctx, workloadID("hooked-1", k))
			if err != nil {
				return err
			}
			hook := s.Hooks["cb"]
			if hook == nil {
				return errors.New("the hook is not created yet")
			}
			_, err = inputs.DeliverHook(ctx, hook.Token, json.RawMessage(`"called back"`), "callback-1")
			return err
		})
	}
}

// awaitWorkload waits for every run startWorkload started and checks its output.
func awaitWorkload(t *testing.T, ctx context.Context, client *flow.Client, copies int) {
	t.Helper()
	for k := range copies {
		for _, r := range faultRuns {
			var out json.RawMessage
			result(t, ctx, client, workloadID(r.id, k), &out)
			require.JSONEq(t, r.want, string(out), "run %s", workloadID(r.id, k))
		}
	}
}

// requireConsistent checks every run the runs index lists: its history passes the invariants
// checker and its index entry equals a fresh projection of it (waiting for the history service
// to catch up); and no timer entry is left once every run ended.
func requireConsistent(t *testing.T, ctx context.Context, js jetstream.JetStream, client *flow.Client) {
	t.Helper()
	st, err := js.Stream(ctx, streams.History)
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(streams.AllRuns))
	require.NoError(t, err)
	runs, err := js.KeyValue(ctx, streams.RunsBucket)
	require.NoError(t, err)
	for subject := range info.State.Subjects {
		runID := subject[len(streams.Layout{}.Subject("")):]
		hist, err := client.History(ctx, runID, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(runID, hist), "run %s", runID)
		s, err := core.Project(runID, hist)
		require.NoError(t, err)
		require.True(t, s.Terminal(), "run %s ended: %s\n%s", runID, s.Status, describeRun(client, runID))
		var entry core.Summary
		require.Eventually(t, func() bool {
			e, err := runs.Get(ctx, runID)
			if err != nil {
				return false
			}
			// Decoded into a fresh value: decoding into the last poll's would keep its fields that
			// the entry now leaves out (a queued run's detail, once it completed).
			entry = core.Summary{}
			return json.Unmarshal(e.Value(), &entry) == nil && entry.Equal(s.Summary())
		}, 30*time.Second, 10*time.Millisecond, "the index entry of run %s equals its projection: %+v vs %+v", runID, entry, s.Summary())
	}
	timers, err := js.KeyValue(ctx, streams.TimersBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		keys, err := timers.ListKeys(ctx)
		if err != nil {
			return false
		}
		for range keys.Keys() {
			return false
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "no timer entry is left")
}

// inputEngine returns an engine that appends inputs (starts, signals, hook deliveries) as a
// client or the ingress does, through the fault points too.
func inputEngine(t *testing.T, js jetstream.JetStream, f *fault.Injector) *engine.Engine {
	t.Helper()
	st, err := jsstore.New(t.Context(), js, nil)
	require.NoError(t, err)
	host, err := jshost.New(t.Context(), js, "crashtest", natstest.Logger())
	require.NoError(t, err)
	host.Faults = f
	e, err := engine.New(engine.Config{Store: st, Host: host, Logger: natstest.Logger(), Faults: f})
	require.NoError(t, err)
	return e
}

// retry calls fn until it succeeds: an injected fault fails a write the caller then repeats.
func retry(t *testing.T, ctx context.Context, fn func() error) {
	t.Helper()
	for {
		err := fn()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// faultRegistry returns the workload's workflows.
func faultRegistry() *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: natstest.Logger()})
	registerWorkload(reg)
	return reg
}

// registerWorkload registers the workload's workflows and steps in reg.
func registerWorkload(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, "seq", historytest.Steps)
	flow.RegisterStep(reg, "inc", historytest.Inc)
	// tagged upserts search attributes twice around a step: the runs index must end holding
	// the start's customer and the last upsert's values, whatever fault hit between writes.
	flow.RegisterWorkflow(reg, "tagged", func(ctx *flow.Context, n int) (flow.Decision, error) {
		if !ctx.Upserted("begun") {
			return ctx.UpsertAttributes("begun", flow.Attrs{"stage": "begun", "n": n}), nil
		}
		if _, ok, err := flow.Output[int](ctx, "work"); err != nil || !ok {
			return ctx.ScheduleStep("work", "inc", n), err
		}
		if !ctx.Upserted("done") {
			return ctx.UpsertAttributes("done", flow.Attrs{"stage": "done"}), nil
		}
		var customer string
		_, err := ctx.Attribute("customer", &customer)
		return ctx.Complete(customer), err
	}, flow.WithSearchAttributes(flow.Keyword("customer"), flow.Keyword("stage"), flow.Int("n")))
	flow.RegisterWorkflow(reg, "limited", historytest.Steps, flow.WithFlowControl(flow.FlowControl{Concurrency: 1, Rate: 100, RatePeriod: time.Second}))
	flow.RegisterWorkflow(reg, "doze", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if !ctx.Fired("nap") {
			return ctx.Sleep("nap", 50*time.Millisecond), nil
		}
		return ctx.Complete("rested"), nil
	})
	flow.RegisterWorkflow(reg, "flaky", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		out, ok, err := flow.Output[string](ctx, "try")
		if err != nil || !ok {
			return ctx.ScheduleStep("try", "firstFails", nil, flow.WithRetry(flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 20 * time.Millisecond})), err
		}
		return ctx.Complete(out), nil
	})
	flow.RegisterStep(reg, "firstFails", func(ctx context.Context, _ any) (string, error) {
		if info, _ := flow.StepInfoFrom(ctx); info.Attempt == 1 {
			return "", errors.New("first attempt fails")
		}
		return "second time lucky", nil
	})
	flow.RegisterWorkflow(reg, "waiter", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		v, ok, err := flow.SignalValue[string](ctx, "go")
		if err != nil || !ok {
			return ctx.AwaitSignal("go", "go"), err
		}
		return ctx.Complete(v), nil
	})
	flow.RegisterWorkflow(reg, "parent", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		v, ok, err := flow.ChildOutput[int](ctx, "kid")
		if err != nil || !ok {
			return ctx.StartChild("kid", "seq", 2), err
		}
		return ctx.Complete(v), nil
	})
	flow.RegisterWorkflow(reg, "chain", func(ctx *flow.Context, n int) (flow.Decision, error) {
		if n < 2 {
			return ctx.ContinueAsNew(n + 1), nil
		}
		return ctx.Complete(n), nil
	})
	flow.RegisterWorkflow(reg, "hooked", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		if v := ctx.Hook("cb"); v != nil {
			return ctx.Complete(v), nil
		}
		return ctx.CreateHook("cb", nil), nil
	})
}
