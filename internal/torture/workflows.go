package torture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// In is the input of every torture workflow: a small script the workflow follows, in this
// order: its steps, a nap, a wait for signal "go", a child, then continue-as-new until
// generation CAN, then it completes. Accepted "slow" updates are served first, each by a step
// and then completed with the step's output.
type In struct {
	// Key is the flow-control key (definitions with KeyPath "$.key").
	Key string `json:"key,omitempty"`
	// Steps is the number of sequential steps s0..s<Steps-1>.
	Steps int `json:"steps,omitempty"`
	// Flaky makes every step's first attempt fail (retried after 50ms).
	Flaky bool `json:"flaky,omitempty"`
	// NapMs sleeps on a durable timer after the steps.
	NapMs int `json:"nap_ms,omitempty"`
	// Go waits for signal "go" after the nap.
	Go bool `json:"go,omitempty"`
	// Child starts child "kid" (definition kid) and waits for it to end.
	Child bool `json:"child,omitempty"`
	// CAN continues the run as new until its generation Gen reaches CAN.
	CAN int `json:"can,omitempty"`
	Gen int `json:"gen,omitempty"`
}

// Output is what a torture run completes with.
type Output struct {
	Steps int    `json:"steps"`
	Go    string `json:"go,omitempty"`
	Sum   int    `json:"sum"`
	Gen   int    `json:"gen"`
}

// The definitions every process of a torture stack registers. Each runs the same script (In);
// they differ in flow control and retention, so that every OnLimit policy, key and group limits,
// rates and retention deletions meet every other operation.
const (
	// DefPlain has no flow control and the service's retention (long).
	DefPlain = "plain"
	// DefQueue: at most 1 admitted run per key and 2 per definition; the excess queues.
	DefQueue = "fcqueue"
	// DefNewest: at most 1 admitted run per key; a run arriving while it is full is cancelled.
	DefNewest = "fcnewest"
	// DefOldest: at most 1 admitted run per key; the oldest admitted run is cancelled for the
	// one that arrives.
	DefOldest = "fcoldest"
	// DefRated: at most 2 admissions per key per second and 3 per definition per second.
	DefRated = "fcrated"
	// DefSharedA and DefSharedB share group "shared": at most 2 admitted runs of both together.
	DefSharedA = "fcshareda"
	DefSharedB = "fcsharedb"
	// DefBrief has no flow control and a retention of BriefRetention: its ended runs are
	// deleted during the sequence.
	DefBrief = "brief"
	// DefBriefQueue is DefQueue's control with DefBrief's retention.
	DefBriefQueue = "briefq"
	// DefKid is the definition of child runs: one step, then it completes.
	DefKid = "kid"
)

// BriefRetention is how long the ended runs of DefBrief and DefBriefQueue are kept.
const BriefRetention = time.Second

// SharedGroup is the flow-control group of DefSharedA and DefSharedB.
const SharedGroup = "shared"

// Definitions lists the definitions the generator starts (DefKid only runs as a child).
var Definitions = []string{DefPlain, DefQueue, DefNewest, DefOldest, DefRated, DefSharedA, DefSharedB, DefBrief, DefBriefQueue}

// Controls returns the flow control each definition registers, nil for none.
func Controls() map[string]*flow.FlowControl {
	keyed := func(p flow.OnLimit) *flow.FlowControl {
		return &flow.FlowControl{KeyPath: "$.key", KeyConcurrency: 1, OnLimit: p}
	}
	queue := &flow.FlowControl{KeyPath: "$.key", KeyConcurrency: 1, Concurrency: 2}
	shared := &flow.FlowControl{Group: SharedGroup, Concurrency: 2}
	return map[string]*flow.FlowControl{
		DefQueue:      queue,
		DefNewest:     keyed(flow.OnLimitCancelNewest),
		DefOldest:     keyed(flow.OnLimitCancelOldest),
		DefRated:      {KeyPath: "$.key", KeyRate: 2, KeyRatePeriod: time.Second, Rate: 3, RatePeriod: time.Second},
		DefSharedA:    shared,
		DefSharedB:    shared,
		DefBriefQueue: queue,
	}
}

// Update names.
const (
	// UpdateAdd is validated (a negative amount is rejected) and completed at once with the
	// sum of the amounts of the run's completed "add" updates, this one included.
	UpdateAdd = "add"
	// UpdateSlow is accepted, then served by a step "u-<update ID>" and completed with its
	// output.
	UpdateSlow = "slow"
	// QuerySum answers the sum of the completed "add" updates.
	QuerySum = "sum"
	// SignalGo is the signal the scripts wait for; any other name is buffered and ignored.
	SignalGo = "go"
)

// NewRegistry returns the registry of the torture definitions.
func NewRegistry(logger *slog.Logger) *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: logger})
	controls := Controls()
	for _, def := range Definitions {
		var opts []flow.WorkflowOption
		if c := controls[def]; c != nil {
			opts = append(opts, flow.WithFlowControl(*c))
		}
		if def == DefBrief || def == DefBriefQueue {
			opts = append(opts, flow.WithRetention(BriefRetention))
		}
		flow.RegisterWorkflow(reg, def, script, opts...)
		registerUpdates(reg, def)
	}
	flow.RegisterWorkflow(reg, DefKid, script)
	flow.RegisterStep(reg, "rec", rec)
	return reg
}

func registerUpdates(reg *flow.Registry, def string) {
	flow.RegisterUpdate(reg, def, UpdateAdd, flow.UpdateHandler[int]{
		Validate: func(_ *flow.Context, _ *flow.Update, n int) error {
			if n < 0 {
				return flow.NewError("negative", fmt.Sprintf("amount %d is negative", n))
			}
			return nil
		},
		Complete: func(ctx *flow.Context, _ *flow.Update, n int) (any, error) {
			return sumAdds(ctx) + n, nil
		},
	})
	flow.RegisterUpdate(reg, def, UpdateSlow, flow.UpdateHandler[int]{})
	flow.RegisterQuery(reg, def, QuerySum, func(ctx *flow.Context, _ any) (int, error) { return sumAdds(ctx), nil })
}

// sumAdds sums the amounts of the run's completed "add" updates.
func sumAdds(ctx *flow.Context) int {
	sum := 0
	for _, u := range ctx.Updates() {
		if u.Name != UpdateAdd || u.Status != flow.UpdateCompleted {
			continue
		}
		var n int
		if flow.DecodeUpdate(u, &n) == nil {
			sum += n
		}
	}
	return sum
}

var stepRetry = flow.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond}

// script is every torture workflow: it follows its input (In).
func script(ctx *flow.Context, in In) (flow.Decision, error) {
	// The oldest open update first: its step, then its completion.
	if open := ctx.OpenUpdates(); len(open) > 0 {
		u := open[0]
		id := "u-" + u.ID
		out, ok, err := flow.Output[string](ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			return ctx.CompleteUpdate(u.ID, out), nil
		}
		// The update's step takes a while, so that operations meet the update while it is open.
		return ctx.ScheduleStep(id, "rec", stepInput{SleepMs: slowUpdateMs}, flow.WithRetry(stepRetry)), nil
	}
	for i := range in.Steps {
		id := fmt.Sprintf("s%d", i)
		if _, ok, err := flow.Output[string](ctx, id); err != nil || !ok {
			return ctx.ScheduleStep(id, "rec", stepInput{Flaky: in.Flaky}, flow.WithRetry(stepRetry)), err
		}
	}
	if in.NapMs > 0 && !ctx.Fired("nap") {
		return ctx.Sleep("nap", time.Duration(in.NapMs)*time.Millisecond), nil
	}
	var got string
	if in.Go {
		v, ok, err := flow.SignalValue[string](ctx, SignalGo)
		if err != nil || !ok {
			return ctx.AwaitSignal(SignalGo, SignalGo), err
		}
		got = v
	}
	if in.Child && ctx.Child("kid") == nil {
		// Scheduling the child again while it runs re-issues the same decision: a wait.
		return ctx.StartChild("kid", DefKid, In{Steps: 1}), nil
	}
	if in.Gen < in.CAN {
		next := in
		next.Gen++
		return ctx.ContinueAsNew(next), nil
	}
	return ctx.Complete(Output{Steps: in.Steps, Go: got, Sum: sumAdds(ctx), Gen: in.Gen}), nil
}

type stepInput struct {
	Flaky   bool `json:"flaky,omitempty"`
	SleepMs int  `json:"sleep_ms,omitempty"`
}

// slowUpdateMs is how long the step serving a "slow" update takes.
const slowUpdateMs = 500

var errFlaky = errors.New("torture: a flaky step's first attempt fails")

// rec is the step of every script: it takes SleepMs, fails its first attempt when asked to, and
// returns its idempotency key, so that a run's output names the runs and steps that produced
// it.
func rec(ctx context.Context, in stepInput) (string, error) {
	info, _ := flow.StepInfoFrom(ctx)
	if in.SleepMs > 0 {
		select {
		case <-time.After(time.Duration(in.SleepMs) * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if in.Flaky && info.Attempt == 1 {
		return "", errFlaky
	}
	return flow.IdempotencyKey(ctx, ""), nil
}
