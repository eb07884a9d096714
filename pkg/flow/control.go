package flow

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// FlowControl limits how many runs of a definition are active at once and how many start per
// period, globally and per key, and says what happens to the excess (docs/flow-control.md). A
// zero limit is no limit. A run under flow control is queued at start (status "queued") and
// makes its first decision once the admission controller (in the scheduler service) admits it.
type FlowControl struct {
	// Group names the limits the definition's runs count against; definitions that name the
	// same group share them. Defaults to the definition's name.
	Group string
	// KeyPath is where the concurrency key is read from the input: "$." and a dotted path of
	// field names, such as "$.customer". Required with a per-key limit, unless every start
	// gives its key (StartOptions.ControlKey).
	KeyPath string
	// Concurrency caps the runs admitted and not ended; KeyConcurrency caps those of one key.
	Concurrency, KeyConcurrency int
	// Rate caps the runs admitted in any window of RatePeriod; KeyRate caps those of one key
	// in any window of KeyRatePeriod. A rate limit makes the excess wait, whatever OnLimit.
	Rate          int
	RatePeriod    time.Duration
	KeyRate       int
	KeyRatePeriod time.Duration
	// OnLimit says what happens to a run that arrives while a concurrency limit is full:
	// OnLimitQueue (the default), OnLimitCancelNewest or OnLimitCancelOldest.
	OnLimit OnLimit
}

// OnLimit is a FlowControl's policy for runs beyond a concurrency limit.
type OnLimit = event.OnLimit

// The policies of a full concurrency limit.
const (
	// OnLimitQueue: the run waits, higher priority first, first come first served within a
	// priority.
	OnLimitQueue = event.OnLimitQueue
	// OnLimitCancelNewest: the run that arrives is cancelled (run.cancelled, cause flow_control).
	OnLimitCancelNewest = event.OnLimitCancelNewest
	// OnLimitCancelOldest: the oldest admitted run of the full limit is cancelled, and the run
	// that arrives takes its slot once it has ended.
	OnLimitCancelOldest = event.OnLimitCancelOldest
)

// spec returns the control as run.started records it, before its key is read from an input.
func (c FlowControl) spec() *event.FlowControl {
	return &event.FlowControl{Group: c.Group, KeyPath: c.KeyPath, Concurrency: c.Concurrency, KeyConcurrency: c.KeyConcurrency,
		Rate: c.Rate, RatePeriod: event.Duration(c.RatePeriod), KeyRate: c.KeyRate, KeyRatePeriod: event.Duration(c.KeyRatePeriod),
		OnLimit: c.OnLimit}
}

// WithFlowControl puts the definition's new runs under flow control c. Workers publish it with
// their registration, so that every ingress applies it to each start; the run records the
// resolved control (its key read from the input) in run.started, so a change of c applies to
// runs started after the change only.
func WithFlowControl(c FlowControl) WorkflowOption {
	return func(w *workflowEntry) { w.control = c.spec() }
}

// Singleton modes.
type Singleton int

const (
	// SingletonSkip cancels a run that starts while one of its key is active.
	SingletonSkip Singleton = iota
	// SingletonReplace cancels the active run of the key, and the new one runs once it ended.
	SingletonReplace
)

// WithSingleton lets at most one run per key be active: the key is read from the input at
// keyPath ("" for one run of the whole definition). It is flow control with a concurrency
// limit of 1 and the policy cancel_newest (SingletonSkip) or cancel_oldest (SingletonReplace).
func WithSingleton(keyPath string, mode Singleton) WorkflowOption {
	c := FlowControl{KeyPath: keyPath, OnLimit: OnLimitCancelNewest}
	if mode == SingletonReplace {
		c.OnLimit = OnLimitCancelOldest
	}
	if keyPath == "" {
		c.Concurrency = 1
	} else {
		c.KeyConcurrency = 1
	}
	return WithFlowControl(c)
}

// checkControl reports a flow control that no run could start under.
func checkControl(definition string, c *event.FlowControl) error {
	if c == nil {
		return nil
	}
	if c.KeyPath != "" {
		if err := core.CheckKeyPath(c.KeyPath); err != nil {
			return err
		}
	}
	if !c.Keyed() && c.KeyPath != "" {
		return fmt.Errorf("flow control has key path %q but no per-key limit; set KeyConcurrency or KeyRate", c.KeyPath)
	}
	check := *c
	if check.Group == "" {
		check.Group = definition
	}
	return check.Validate()
}

// flowControl returns the flow control definition's runs start under, with its key path; nil
// for a definition without one, or not registered.
func (r *Registry) flowControl(definition string) *event.FlowControl {
	w, err := r.workflow(definition)
	if err != nil || w.control == nil {
		return nil
	}
	c := *w.control
	return &c
}

// controlExtensions adds a start's priority and flow control to the extensions of its CloudEvent.
func controlExtensions(ext map[string]string, opts *StartOptions) error {
	if opts.Priority != 0 {
		ext[api.ExtPriority] = strconv.Itoa(opts.Priority)
	}
	if opts.ControlKey != "" {
		ext[api.ExtControlKey] = opts.ControlKey
	}
	if opts.Control != nil {
		b, err := json.Marshal(opts.Control.spec())
		if err != nil {
			return err
		}
		ext[api.ExtControl] = string(b)
	}
	return nil
}

// StepLimit caps the attempts of one step name across every worker of the registry's steps: at
// most Concurrency in flight at once and at most Rate started in any window of Period. A worker
// takes a slot (in FLOW_LIMITS) before it runs an attempt; when none is free the run's task is
// redelivered later and the attempt waits without holding a worker, listed as waiting with the
// reason (docs/flow-control.md). Attempts of runs of higher priority take a freed slot first.
type StepLimit = core.StepLimit

// LimitStep limits the attempts of step name, registered or to be registered in r. It panics on
// a limit no attempt could run under, as registration does on a programming error.
func LimitStep(r *Registry, name string, l StepLimit) {
	if err := event.ValidateName("step", name); err != nil {
		panic(fmt.Sprintf("flow: LimitStep: %v", err))
	}
	if err := l.Validate(); err != nil {
		panic(fmt.Sprintf("flow: LimitStep(%q): %v", name, err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stepLimits[name] = l
}

// stepLimit returns the limit of step name, if LimitStep set one.
func (r *Registry) stepLimit(name string) (StepLimit, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l, ok := r.stepLimits[name]
	return l, ok
}

// anyStepLimits reports whether any step of r is limited.
func (r *Registry) anyStepLimits() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.stepLimits) > 0
}
