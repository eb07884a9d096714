package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/flow"
)

// The workflows and steps every process of a test registers, parent and children alike.
const (
	// effectWorkflow runs one step with an external effect (TestWorkerKilledMidStep).
	effectWorkflow = "effect"
	// napWorkflow sleeps on a durable timer, then completes (TestSchedulerKilledWithPendingTimers).
	napWorkflow = "nap"
	// faninWorkflow runs a batch of steps, then one more step on their outputs
	// (TestTwoWorkersDriveSameRuns).
	faninWorkflow = "fanin"
	// inboxWorkflow creates the hook "cb", then waits for the signal "stop", buffering every
	// other signal; the hook's delivery or the stop signal ends it with its payload
	// (TestServicesAsProcesses).
	inboxWorkflow = "inbox"
)

// Files in the scratch directory shared by the parent and its children.
const (
	invocationsFile = "invocations" // one line per step function invocation
	effectsDir      = "effects"     // one file per applied effect, named by its idempotency key
	markerFile      = "marker"      // created by the first invocation of applyEffect, which then hangs
)

// effectInput is the input of the effect workflow.
type effectInput struct {
	Resource string `json:"resource"`
}

// napInput is the input of the nap workflow.
type napInput struct {
	Nap time.Duration `json:"nap"`
}

// faninInput is the input of the fanin workflow.
type faninInput struct {
	Parts int `json:"parts"`
}

// newRegistry returns the registry of the test workflows. Step functions record their
// invocations and effects under dir, tagged with the process name.
func newRegistry(dir, name string) *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: natstest.Logger()})
	s := &steps{dir: dir, name: name}

	flow.RegisterWorkflow(reg, inboxWorkflow, func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
		if p := ctx.Hook("cb"); p != nil {
			return ctx.Complete(p), nil
		}
		if p := ctx.Signal("stop"); p != nil {
			return ctx.Complete(p), nil
		}
		if ctx.Snapshot().Hooks["cb"] == nil {
			return ctx.CreateHook("cb", nil), nil
		}
		return ctx.AwaitSignal("stop", "stop"), nil
	})
	flow.RegisterWorkflow(reg, effectWorkflow, func(ctx *flow.Context, in effectInput) (flow.Decision, error) {
		out, ok, err := flow.Output[string](ctx, "apply")
		if err != nil || !ok {
			return ctx.ScheduleStep("apply", "applyEffect", in.Resource), err
		}
		return ctx.Complete(out), nil
	})
	flow.RegisterStep(reg, "applyEffect", s.applyEffect)

	flow.RegisterWorkflow(reg, napWorkflow, func(ctx *flow.Context, in napInput) (flow.Decision, error) {
		if !ctx.Fired("nap") {
			return ctx.Sleep("nap", in.Nap), nil
		}
		return ctx.Complete("rested"), nil
	})

	flow.RegisterWorkflow(reg, faninWorkflow, func(ctx *flow.Context, in faninInput) (flow.Decision, error) {
		batch := make([]flow.Step, in.Parts)
		sum, done := 0, 0
		for i := range batch {
			id := fmt.Sprintf("part-%d", i)
			batch[i] = flow.Step{ID: id, Name: "square", Input: i}
			v, ok, err := flow.Output[int](ctx, id)
			if err != nil {
				return nil, err
			}
			if ok {
				sum += v
				done++
			}
		}
		if done < in.Parts {
			return ctx.ScheduleSteps(batch...), nil
		}
		total, ok, err := flow.Output[int](ctx, "total")
		if err != nil || !ok {
			return ctx.ScheduleStep("total", "square", sum), err
		}
		return ctx.Complete(total), nil
	})
	flow.RegisterStep(reg, "square", s.square)
	registerWorkload(reg)
	return reg
}

type steps struct {
	dir, name string
}

// record appends one line naming the invocation to the invocations file. Lines are short and
// written with O_APPEND, so that concurrent processes do not interleave them.
func (s *steps) record(ctx context.Context) error {
	info, _ := flow.StepInfoFrom(ctx)
	f, err := os.OpenFile(filepath.Join(s.dir, invocationsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s %d %s\n", info.RunID, info.StepID, info.Attempt, s.name)
	return errors.Join(err, f.Close())
}

// createOnce creates file path unless it exists, and reports whether it created it.
func createOnce(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, f.Close()
}

// applyEffect records its invocation, applies its external effect once per idempotency key (a
// file named after the key), and then, on the first invocation only, creates the marker file and
// hangs, as a worker that dies before committing the step's result would.
func (s *steps) applyEffect(ctx context.Context, resource string) (string, error) {
	if err := s.record(ctx); err != nil {
		return "", err
	}
	key := flow.IdempotencyKey(ctx, resource)
	if _, err := createOnce(filepath.Join(s.dir, effectsDir, key)); err != nil {
		return "", err
	}
	first, err := createOnce(filepath.Join(s.dir, markerFile))
	if err != nil {
		return "", err
	}
	if first {
		<-ctx.Done() // the test kills the process meanwhile
		return "", ctx.Err()
	}
	return "applied " + key, nil
}

// square records its invocation and squares its input.
func (s *steps) square(ctx context.Context, n int) (int, error) {
	if err := s.record(ctx); err != nil {
		return 0, err
	}
	return n * n, nil
}
