package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// The workflows of the workloads. Steps are trivial, as the shared plan defines them, so that
// what is measured is the engine: its checkpoints, its wake-ups and its scheduling.

// signalTopic is the Send/Recv topic W5 and W7 signal on.
const signalTopic = "signal"

// stepMarks, while W6 runs its one chain, receives the time at which each step of that chain
// started executing (index = step number). DBOS records step times in whole milliseconds, too
// coarse for 100 steps of a tenth of a millisecond each; the harness stamps them itself.
var stepMarks atomic.Pointer[[]time.Time]

// chain runs n sequential steps, each returning its input + 1, and completes with the last
// output (W1, W2: n = 10; W6: n = 10,000). Each step is one dbos.RunAsStep, that is one
// checkpoint row written before the next step starts.
func chain(ctx dbos.Context, n int) (int, error) {
	marks := stepMarks.Load()
	v := 0
	for range n {
		in := v
		out, err := dbos.RunAsStep(ctx, func(context.Context) (int, error) {
			if marks != nil && in < len(*marks) {
				(*marks)[in] = time.Now()
			}
			return in + 1, nil
		}, dbos.WithStepName("inc"))
		if err != nil {
			return 0, err
		}
		v = out
	}
	return v, nil
}

// sleeper sleeps durably (dbos.Sleep checkpoints its deadline, then waits on a timer in this
// process) and completes with the wall-clock time, in Unix nanoseconds, at which the sleep
// returned: W3's "fired" time.
func sleeper(ctx dbos.Context, d time.Duration) (int64, error) {
	if _, err := dbos.Sleep(ctx, d); err != nil {
		return 0, err
	}
	return time.Now().UnixNano(), nil
}

// fanout starts n steps at once with dbos.Go, the documented way to run steps concurrently in
// one DBOS workflow (each is a RunAsStep in its own goroutine, its step ID fixed before it
// starts), step i returning i, and completes with the number of outcomes once every channel
// has delivered (W4).
func fanout(ctx dbos.Context, n int) (int, error) {
	outcomes := make([]<-chan dbos.StepOutcome[int], n)
	for i := range n {
		ch, err := dbos.Go(ctx, func(context.Context) (int, error) {
			return i, nil
		}, dbos.WithStepName("member"))
		if err != nil {
			return 0, err
		}
		outcomes[i] = ch
	}
	done := 0
	for _, ch := range outcomes {
		o := <-ch
		if o.Err != nil {
			return 0, o.Err
		}
		done++
	}
	return done, nil
}

// waiter blocks in dbos.Recv until a message arrives on signalTopic and completes with it
// (W5, W7). Recv registers the workflow as a receiver, checkpoints its timeout deadline as a
// "DBOS.sleep" step and then waits; that checkpoint is how the harness confirms the run is
// suspended. The timeout is far beyond any workload.
func waiter(ctx dbos.Context, _ int) (string, error) {
	return dbos.Recv[string](ctx, signalTopic, 24*time.Hour)
}

// register registers every workflow of the harness; DBOS requires it before Launch.
func register(ctx dbos.Context) {
	dbos.RegisterWorkflow(ctx, chain)
	dbos.RegisterWorkflow(ctx, sleeper)
	dbos.RegisterWorkflow(ctx, fanout)
	dbos.RegisterWorkflow(ctx, waiter)
}
