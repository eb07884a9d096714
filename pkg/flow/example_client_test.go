package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/pkg/flow/worker"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/scheduler"
)

// The examples in this file use a Client against a live Flow: startFlow runs what `flow dev`
// runs (an embedded NATS server with JetStream, the history, ingress and scheduler services)
// and a worker serving reg. A program only dials: flow.Dial(ctx, "nats://...", nil).

// approval registers "approval": a run waits for the signal "approve" and completes with its
// payload.
func approval(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, "approval", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		by, ok, err := flow.SignalValue[string](ctx, "approve")
		if err != nil || !ok {
			return ctx.AwaitSignal("approve", "approve"), err
		}
		return ctx.Complete("approved by " + by), nil
	})
}

// startFlow starts Flow and a worker serving reg, and dials a client. It returns once every
// definition of reg has a live worker, with a function that stops everything.
func startFlow(ctx context.Context, reg *flow.Registry, definitions ...string) (*flow.Client, *worker.Worker, func(), error) {
	quiet := slog.New(slog.DiscardHandler)
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) (*flow.Client, *worker.Worker, func(), error) { stop(); return nil, nil, nil, err }
	dir, err := os.MkdirTemp("", "flow-example-")
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, Port: -1, Logger: quiet})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, srv.Shutdown)
	// start starts a service New returned (err its error) and stops it with the rest.
	start := func(svc interface {
		Start(context.Context) error
		Stop() error
	}, err error) error {
		if err == nil {
			err = svc.Start(ctx)
		}
		if err == nil {
			stops = append(stops, func() { svc.Stop() })
		}
		return err
	}
	nats := natsconn.Config{URL: srv.ClientURL()}
	if err := start(history.New(history.Config{NATS: nats, HTTPAddr: "off", Logger: quiet})); err != nil {
		return fail(err)
	}
	if err := start(ingress.New(ingress.Config{NATS: nats, HTTPAddr: "off", Logger: quiet})); err != nil {
		return fail(err)
	}
	if err := start(scheduler.New(scheduler.Config{NATS: nats, HTTPAddr: "off", Logger: quiet})); err != nil {
		return fail(err)
	}
	w, err := worker.New(reg, &worker.Options{URL: srv.ClientURL(), Logger: quiet})
	if err == nil {
		err = w.Start(ctx)
	}
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { w.Stop(context.Background()) })
	client, err := flow.Dial(ctx, srv.ClientURL(), nil)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, client.Close)
	// A start, a schedule or a batch job is refused for a definition no live worker serves.
	for _, d := range definitions {
		for {
			defs, err := client.Definitions().List(ctx, "")
			if err != nil {
				return fail(err)
			}
			if slices.ContainsFunc(defs, func(i flow.DefinitionInfo) bool { return i.Definition == d && len(i.Workers) > 0 }) {
				break
			}
			select {
			case <-ctx.Done():
				return fail(ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return client, w, stop, nil
}

// example starts Flow with a worker serving what register registers (startFlow), under a
// context that ends after 30 seconds, runs body against it, prints body's error if any, and
// stops everything.
func example(register func(*flow.Registry), definitions []string, body func(ctx context.Context, client *flow.Client, w *worker.Worker) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: slog.New(slog.DiscardHandler)})
	register(reg)
	client, w, stop, err := startFlow(ctx, reg, definitions...)
	if err == nil {
		defer stop()
		err = body(ctx, client, w)
	}
	if err != nil {
		fmt.Println("error:", err)
	}
}

// Start a run, signal it, and read its result.
func ExampleClient_Signal() {
	example(approval, []string{"approval"}, func(ctx context.Context, client *flow.Client, _ *worker.Worker) error {
		runID, err := client.Start(ctx, "approval", nil, &flow.StartOptions{RunID: "expense-7"})
		if err != nil {
			return err
		}
		// The signal is recorded in the run's history, and the run decides on it.
		if _, err := client.Signal(ctx, runID, "approve", "ann", nil); err != nil {
			return err
		}
		var out string
		if err := client.Result(ctx, runID, &out); err != nil {
			return err
		}
		fmt.Println(out)
		return nil
	})
	// Output: approved by ann
}

// A schedule starts a run of its definition at each slot: here at 09:00 Paris time on weekdays.
// Trigger acts now, outside the timetable, and names the run it starts.
func ExampleClient_Schedules() {
	example(approval, []string{"approval"}, func(ctx context.Context, client *flow.Client, _ *worker.Worker) error {
		schedules := client.Schedules()
		sd, err := schedules.Create(ctx, "weekday-review", flow.ScheduleConfig{
			Cron: "0 9 * * MON-FRI", TZ: "Europe/Paris", Definition: "approval",
		})
		if err != nil {
			return err
		}
		paris, _ := time.LoadLocation("Europe/Paris")
		next := sd.Next[0].At.In(paris)
		fmt.Println("next at", next.Format("15:04"), "on a weekday:", next.Weekday() != time.Saturday && next.Weekday() != time.Sunday)

		sd, err = schedules.Trigger(ctx, "weekday-review", nil)
		if err != nil {
			return err
		}
		// The scheduler starts the triggered run within moments; signal it once it exists.
		for {
			if _, err = client.Signal(ctx, sd.TriggerRunID, "approve", "the schedule", nil); !errors.Is(err, flow.ErrNotFound) || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		var out string
		if err == nil {
			err = client.Result(ctx, sd.TriggerRunID, &out)
		}
		if err != nil {
			return err
		}
		fmt.Println(out)
		return nil
	})
	// Output:
	// next at 09:00 on a weekday: true
	// approved by the schedule
}

// A batch job applies one operation to every run a filter selects, at a bounded rate: here it
// signals the three runs waiting for approval.
func ExampleBatchClient_Start() {
	example(approval, []string{"approval"}, func(ctx context.Context, client *flow.Client, _ *worker.Worker) error {
		runs := []string{"expense-1", "expense-2", "expense-3"}
		for _, id := range runs {
			if _, err := client.Start(ctx, "approval", nil, &flow.StartOptions{RunID: id}); err != nil {
				return err
			}
		}
		// The job targets the runs the runs index lists when it starts: wait until it lists them.
		waiting := &flow.RunsFilter{Definition: "approval", Where: `status = "suspended"`}
		for {
			page, err := client.Runs(ctx, waiting)
			if err != nil {
				return err
			}
			if page.Total == len(runs) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}

		job, err := client.Batches().Start(ctx, flow.BatchSpec{
			Op: flow.BatchSignal, Definition: "approval", Where: `status = "suspended"`,
			Signal: "approve", Payload: []byte(`"the batch"`),
		}, &flow.BatchOptions{ID: "approve-expenses"})
		if err == nil {
			job, err = client.Batches().Await(ctx, job.ID)
		}
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s, %d of %d applied\n", job.ID, job.State, job.Applied, job.Total)
		for _, id := range runs {
			var out string
			if err := client.Result(ctx, id, &out); err != nil {
				return err
			}
			fmt.Println(id, out)
		}
		return nil
	})
	// Output:
	// approve-expenses: completed, 3 of 3 applied
	// expense-1 approved by the batch
	// expense-2 approved by the batch
	// expense-3 approved by the batch
}

// Pausing a definition holds every run of it: runs start and record their inputs, but workers
// make no decision for them until the definition is unpaused. Workers see the pause through a
// watch, within milliseconds of PauseDefinition returning (docs/pause.md); the example waits for
// its worker to hold the definition before it starts a run.
func ExamplePauseClient_PauseDefinition() {
	report := func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "report", func(ctx *flow.Context, _ any) (flow.Decision, error) {
			return ctx.Complete("report sent"), nil
		})
	}
	example(report, []string{"report"}, func(ctx context.Context, client *flow.Client, w *worker.Worker) error {
		pauses := client.Pauses()
		if _, err := pauses.PauseDefinition(ctx, "report", &flow.PauseOptions{Reason: "mail server down", By: "ann"}); err != nil {
			return err
		}
		for !w.Holds("report") {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		paused, _ := pauses.List(ctx)
		for _, p := range paused {
			fmt.Printf("%s %s paused by %s: %s\n", p.Scope, p.Name, p.By, p.Note)
		}
		runID, err := client.Start(ctx, "report", nil, &flow.StartOptions{RunID: "report-1"})
		if err != nil {
			return err
		}
		wait, stopWaiting := context.WithTimeout(ctx, 500*time.Millisecond)
		err = client.Result(wait, runID, nil)
		stopWaiting()
		fmt.Println("ended while paused:", err == nil)

		if _, err := pauses.UnpauseDefinition(ctx, "report", nil); err != nil {
			return err
		}
		var out string
		if err := client.Result(ctx, runID, &out); err != nil {
			return err
		}
		fmt.Println(out)
		return nil
	})
	// Output:
	// definition report paused by ann: mail server down
	// ended while paused: false
	// report sent
}

// expense registers "expense": a run holds an amount (its input plus the accepted "add"
// updates), answers the query "amount", and waits for the signal "approve".
func expense(reg *flow.Registry) {
	total := func(ctx *flow.Context) int {
		var amount int
		_ = ctx.Input(&amount)
		for _, u := range ctx.Updates() {
			var n int
			if u.Status != flow.UpdateRejected && flow.DecodeUpdate(u, &n) == nil {
				amount += n
			}
		}
		return amount
	}
	flow.RegisterWorkflow(reg, "expense", func(ctx *flow.Context, _ int) (flow.Decision, error) {
		flow.HandleQuery(ctx, "amount", func(struct{}) (int, error) { return total(ctx), nil })
		if ctx.Signal("approve") == nil {
			return ctx.AwaitSignal("approve", "approve"), nil
		}
		return ctx.Complete(total(ctx)), nil
	})
	flow.RegisterUpdate(reg, "expense", "add", flow.UpdateHandler[int]{
		Validate: func(_ *flow.Context, _ *flow.Update, n int) error {
			if n <= 0 {
				return flow.NewError("invalid_amount", "add a positive amount")
			}
			return nil
		},
		Complete: func(ctx *flow.Context, _ *flow.Update, _ int) (any, error) { return total(ctx), nil },
	})
}

// A query reads a run's state from its workflow code, on a worker; it records nothing.
func ExampleClient_Query() {
	example(expense, []string{"expense"}, func(ctx context.Context, client *flow.Client, _ *worker.Worker) error {
		runID, err := client.Start(ctx, "expense", 120, &flow.StartOptions{RunID: "expense-8"})
		if err != nil {
			return err
		}
		var amount int
		if err := client.Query(ctx, runID, "amount", nil, &amount); err != nil {
			return err
		}
		fmt.Println("amount:", amount)
		err = client.Query(ctx, runID, "approver", nil, nil)
		fmt.Println("unknown query:", errors.Is(err, flow.ErrUnknownQuery))
		return nil
	})
	// Output:
	// amount: 120
	// unknown query: true
}

// An update is a request the run answers: validated by the workflow, recorded in history, and
// completed with a result. Update with Wait returns the result, or an *UpdateError.
func ExampleClient_Update() {
	example(expense, []string{"expense"}, func(ctx context.Context, client *flow.Client, _ *worker.Worker) error {
		runID, err := client.Start(ctx, "expense", 120, &flow.StartOptions{RunID: "expense-9"})
		if err != nil {
			return err
		}
		out, err := client.Update(ctx, runID, "add", 30, &flow.UpdateOptions{UpdateID: "taxi", Wait: true})
		if err != nil {
			return err
		}
		var amount int
		_ = out.Decode(&amount)
		fmt.Println("amount after the taxi:", amount)

		_, err = client.Update(ctx, runID, "add", -5, &flow.UpdateOptions{Wait: true})
		var ue *flow.UpdateError
		if errors.As(err, &ue) {
			fmt.Println("rejected:", ue.Status, ue.Kind)
		}
		return nil
	})
	// Output:
	// amount after the taxi: 150
	// rejected: rejected invalid_amount
}
