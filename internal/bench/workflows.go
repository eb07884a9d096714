package bench

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// The benchmark's workflow definitions and steps, registered through the public SDK.
const (
	// defSeq runs seqInput.Steps sequential steps, each returning its input + 1, then (with
	// Await) waits for the signal "go", and completes with the last step's output: W1, W2, W6
	// and W8.
	defSeq = "bench-seq"
	// defSleep sleeps sleepInput.Millis and completes: W3.
	defSleep = "bench-sleep"
	// defFanout schedules one batch of fanoutInput.Steps parallel steps and completes with the
	// sum of their outputs: W4.
	defFanout = "bench-fanout"
	// defAwait waits for the signal "go" and completes with its payload: W5 and W7.
	defAwait = "bench-await"

	stepInc   = "inc"   // n -> n+1
	stepIndex = "index" // n -> n

	signalName = "go"
)

type seqInput struct {
	Steps int  `json:"steps"`
	Start int  `json:"start"`
	Await bool `json:"await,omitempty"`
}

type sleepInput struct {
	Millis int `json:"millis"`
}

type fanoutInput struct {
	Steps int `json:"steps"`
}

// stepID names the i-th step of a run.
func stepID(i int) string { return "s" + strconv.Itoa(i) }

// registry returns the benchmark's definitions and steps.
func registry(logger *slog.Logger) *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: logger})
	flow.RegisterWorkflow(reg, defSeq, seqWorkflow)
	flow.RegisterWorkflow(reg, defSleep, sleepWorkflow)
	flow.RegisterWorkflow(reg, defFanout, fanoutWorkflow)
	flow.RegisterWorkflow(reg, defAwait, awaitWorkflow)
	registerUpdates(reg)
	flow.RegisterStep(reg, stepInc, func(_ context.Context, n int) (int, error) { return n + 1, nil })
	flow.RegisterStep(reg, stepIndex, func(_ context.Context, n int) (int, error) { return n, nil })
	registerQueries(reg)
	registerLarge(reg)
	return reg
}

// seqWorkflow finds the first step not completed by binary search (steps complete in order, so
// the completed ones are a prefix), so that a decision costs O(log steps) lookups however long
// the run: W6's 10,000 steps measure the engine, not a scan in the workflow code.
func seqWorkflow(ctx *flow.Context, in seqInput) (flow.Decision, error) {
	next := sort.Search(in.Steps, func(i int) bool { return ctx.StepOutput(stepID(i)) == nil })
	v := in.Start
	if next > 0 {
		out, _, err := flow.Output[int](ctx, stepID(next-1))
		if err != nil {
			return nil, err
		}
		v = out
	}
	if next < in.Steps {
		return ctx.ScheduleStep(stepID(next), stepInc, v), nil
	}
	if in.Await {
		if _, ok, err := flow.SignalValue[int](ctx, signalName); err != nil || !ok {
			return ctx.AwaitSignal(signalName, signalName), err
		}
	}
	return ctx.Complete(v), nil
}

func sleepWorkflow(ctx *flow.Context, in sleepInput) (flow.Decision, error) {
	if !ctx.Fired("nap") {
		return ctx.Sleep("nap", time.Duration(in.Millis)*time.Millisecond), nil
	}
	return ctx.Complete(in.Millis), nil
}

func fanoutWorkflow(ctx *flow.Context, in fanoutInput) (flow.Decision, error) {
	sum := 0
	for i := range in.Steps {
		v, ok, err := flow.Output[int](ctx, stepID(i))
		if err != nil {
			return nil, err
		}
		if !ok {
			steps := make([]flow.Step, in.Steps)
			for j := range steps {
				steps[j] = flow.Step{ID: stepID(j), Name: stepIndex, Input: j}
			}
			return ctx.ScheduleSteps(steps...), nil
		}
		sum += v
	}
	return ctx.Complete(sum), nil
}

func awaitWorkflow(ctx *flow.Context, _ any) (flow.Decision, error) {
	v, ok, err := flow.SignalValue[int](ctx, signalName)
	if err != nil || !ok {
		return ctx.AwaitSignal(signalName, signalName), err
	}
	return ctx.Complete(v), nil
}

// fanoutSum is the output of a fanout run of n steps.
func fanoutSum(n int) int { return n * (n - 1) / 2 }
