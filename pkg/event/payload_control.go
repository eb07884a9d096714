package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// OnLimit says what happens to a run that arrives while a concurrency limit of its flow control
// is full. Rate limits always make the run wait: they throttle, they never cancel.
type OnLimit string

const (
	// OnLimitQueue makes the run wait for a slot, in priority order (higher first), first come
	// first served within a priority level. The default.
	OnLimitQueue OnLimit = "queue"
	// OnLimitCancelNewest cancels the run that arrives (run.cancelled, cause flow_control): a
	// singleton that skips while one runs is a per-key limit of 1 with this policy.
	OnLimitCancelNewest OnLimit = "cancel_newest"
	// OnLimitCancelOldest cancels the oldest admitted run that holds a slot of the full limit;
	// the run that arrives takes that slot once the cancelled run has ended: a singleton that
	// replaces the one that runs is a per-key limit of 1 with this policy.
	OnLimitCancelOldest OnLimit = "cancel_oldest"
)

// Valid reports whether p is a known policy ("" means queue).
func (p OnLimit) Valid() bool {
	return p == "" || p == OnLimitQueue || p == OnLimitCancelNewest || p == OnLimitCancelOldest
}

// FlowControl is the admission control a run started under, recorded by run.started: the run
// makes no decision until run.admitted is committed. Runs of one Group share its limits; a
// key-scoped limit applies to the runs of the group with the same Key. A zero limit is no limit.
type FlowControl struct {
	// Group names the limits the run counts against: its definition, unless the registration
	// named another group.
	Group string `json:"group"`
	// Key is the run's concurrency key, computed from its input at start (KeyPath), or given at
	// start; "" when the control has no key-scoped limit.
	Key string `json:"key,omitempty"`
	// KeyPath is the JSON path of the input the key was read from, such as "$.customer"; empty
	// when the key was given at start.
	KeyPath string `json:"key_path,omitempty"`
	// Concurrency caps the group's admitted runs that have not ended; KeyConcurrency caps those
	// of one key.
	Concurrency    int `json:"concurrency,omitempty"`
	KeyConcurrency int `json:"key_concurrency,omitempty"`
	// Rate caps the group's admissions in any window of RatePeriod; KeyRate caps those of one
	// key in any window of KeyRatePeriod.
	Rate          int      `json:"rate,omitempty"`
	RatePeriod    Duration `json:"rate_period,omitempty"`
	KeyRate       int      `json:"key_rate,omitempty"`
	KeyRatePeriod Duration `json:"key_rate_period,omitempty"`
	// OnLimit is what happens when a concurrency limit is full; "" means queue.
	OnLimit OnLimit `json:"on_limit,omitempty"`
}

// Policy returns the control's OnLimit, queue when unset.
func (c *FlowControl) Policy() OnLimit {
	if c.OnLimit == "" {
		return OnLimitQueue
	}
	return c.OnLimit
}

// Keyed reports whether a key-scoped limit applies.
func (c *FlowControl) Keyed() bool { return c.KeyConcurrency > 0 || c.KeyRate > 0 }

// Describe renders the limits in words, for `flow status`, the UI and cancellation reasons.
func (c *FlowControl) Describe() string {
	s := "group " + c.Group
	if c.Key != "" {
		s += fmt.Sprintf(", key %q", c.Key)
	}
	if c.Concurrency > 0 {
		s += fmt.Sprintf(", at most %d running", c.Concurrency)
	}
	if c.KeyConcurrency > 0 {
		s += fmt.Sprintf(", at most %d running per key", c.KeyConcurrency)
	}
	if c.Rate > 0 {
		s += fmt.Sprintf(", at most %d starts per %s", c.Rate, time.Duration(c.RatePeriod))
	}
	if c.KeyRate > 0 {
		s += fmt.Sprintf(", at most %d starts per %s per key", c.KeyRate, time.Duration(c.KeyRatePeriod))
	}
	return s + ", " + string(c.Policy()) + " when full"
}

// Validate reports the first malformed field of the control.
func (c *FlowControl) Validate() error {
	var errs []error
	if err := ValidateName("flow control group", c.Group); err != nil {
		errs = append(errs, fieldError("control.group", err.Error()))
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"concurrency", c.Concurrency}, {"key_concurrency", c.KeyConcurrency}, {"rate", c.Rate}, {"key_rate", c.KeyRate}} {
		if n.v < 0 {
			errs = append(errs, fieldError("control."+n.field, fmt.Sprintf("must not be negative, got %d", n.v)))
		}
	}
	if c.Rate > 0 && c.RatePeriod <= 0 {
		errs = append(errs, fieldError("control.rate_period", "must be positive when rate is set"))
	}
	if c.KeyRate > 0 && c.KeyRatePeriod <= 0 {
		errs = append(errs, fieldError("control.key_rate_period", "must be positive when key_rate is set"))
	}
	if c.Concurrency == 0 && c.KeyConcurrency == 0 && c.Rate == 0 && c.KeyRate == 0 {
		errs = append(errs, fieldError("control", "sets no limit; set concurrency, key_concurrency, rate or key_rate"))
	}
	if !c.OnLimit.Valid() {
		errs = append(errs, fieldError("control.on_limit", fmt.Sprintf("must be queue, cancel_newest or cancel_oldest; got %q", c.OnLimit)))
	}
	return errors.Join(errs...)
}

// RunAdmitted records that the admission controller let a run under flow control (the control
// of its run.started) go on: a slot of every concurrency limit and a token of every rate limit
// were taken for it, before this event was appended. Its recorded time is the time its rate
// tokens were taken at. The run makes its first decision after it; a run that ends releases its
// slots after its terminal event is committed.
type RunAdmitted struct {
	// Group and Key repeat the control's, for readers of the event alone.
	Group string `json:"group"`
	Key   string `json:"key,omitempty"`
	// Queued is how long the run waited, from run.started.
	Queued Duration `json:"queued,omitempty"`
}

func (*RunAdmitted) EventType() Type { return TypeRunAdmitted }

// PayloadFields implements Described.
func (*RunAdmitted) PayloadFields() []*json.RawMessage { return nil }

// Summarize implements Described.
func (p *RunAdmitted) Summarize() string {
	s := "admitted by flow control, group " + p.Group
	if p.Key != "" {
		s += fmt.Sprintf(", key %q", p.Key)
	}
	return s + fmt.Sprintf(", after %s queued", time.Duration(p.Queued))
}

// Validate implements Payload.
func (p *RunAdmitted) Validate() error { return required("group", p.Group) }
