package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Exhaustion says what happens when a step fails for the last time.
type Exhaustion string

const (
	// ExhaustionFailRun ends the run as failed, after cancelling every unsettled step. The default.
	ExhaustionFailRun Exhaustion = "fail_run"
	// ExhaustionReturnError settles the step as failed and hands its error to the workflow
	// (ctx.StepError), which decides what to do.
	ExhaustionReturnError Exhaustion = "return_error"
	// ExhaustionPauseRun pauses the run (run.paused, cause step_exhausted) instead of failing
	// the step, when the step exhausts its attempts with a retryable error: fix what fails and
	// unpause the run, and the step gets a fresh attempt. A non-retryable error fails the run as
	// under ExhaustionFailRun. See docs/pause.md.
	ExhaustionPauseRun Exhaustion = "pause_run"
)

// Defaults applied by [RetryPolicy.Normalize] to zero fields.
const (
	DefaultMaxAttempts        = 3
	DefaultInitialInterval    = time.Second
	DefaultBackoffCoefficient = 2.0
	DefaultMaxInterval        = time.Minute
)

// RetryPolicy governs the attempts of one step. The zero value means the defaults. A step's
// policy is recorded, normalized, in step.scheduled and compared field by field on replay.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts, first included. 1 disables retries.
	// Defaults to 3.
	MaxAttempts int
	// InitialInterval is the backoff before attempt 2. Defaults to 1 second.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the interval after each failed attempt; at least 1.
	// Defaults to 2.
	BackoffCoefficient float64
	// MaxInterval caps the backoff. Defaults to 1 minute, or InitialInterval if that is larger.
	MaxInterval time.Duration
	// NonRetryable lists error kinds that fail the step at once, whatever attempts are left.
	NonRetryable []string
	// OnExhaustion says what a final failure does. Defaults to ExhaustionFailRun.
	OnExhaustion Exhaustion
}

// Normalize returns p with defaults applied to zero fields and NonRetryable sorted and
// deduplicated, so that equal policies compare equal.
func (p RetryPolicy) Normalize() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = DefaultInitialInterval
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = DefaultBackoffCoefficient
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = max(DefaultMaxInterval, p.InitialInterval)
	}
	if p.OnExhaustion == "" {
		p.OnExhaustion = ExhaustionFailRun
	}
	if len(p.NonRetryable) > 0 {
		p.NonRetryable = slices.Compact(slices.Sorted(slices.Values(p.NonRetryable)))
	} else {
		p.NonRetryable = nil
	}
	return p
}

// Validate reports the first field of a normalized policy that is out of range.
func (p RetryPolicy) Validate() error {
	var errs []error
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("retry.max_attempts must be at least 1, got %d", p.MaxAttempts))
	}
	if p.InitialInterval < 0 {
		errs = append(errs, fmt.Errorf("retry.initial_interval must not be negative, got %s", p.InitialInterval))
	}
	if p.BackoffCoefficient < 1 || math.IsNaN(p.BackoffCoefficient) || math.IsInf(p.BackoffCoefficient, 0) {
		errs = append(errs, fmt.Errorf("retry.backoff_coefficient must be a finite number of at least 1, got %v", p.BackoffCoefficient))
	}
	if p.MaxInterval < p.InitialInterval {
		errs = append(errs, fmt.Errorf("retry.max_interval (%s) must not be less than retry.initial_interval (%s)", p.MaxInterval, p.InitialInterval))
	}
	if p.OnExhaustion != ExhaustionFailRun && p.OnExhaustion != ExhaustionReturnError && p.OnExhaustion != ExhaustionPauseRun {
		errs = append(errs, fmt.Errorf("retry.on_exhaustion must be fail_run, return_error or pause_run, got %q", p.OnExhaustion))
	}
	return errors.Join(errs...)
}

// Backoff returns the wait before attempt next (2 or more) of a normalized policy:
// InitialInterval × BackoffCoefficient^(next-2), capped at MaxInterval. It has no jitter, so
// that a replay computes the same due time.
func (p RetryPolicy) Backoff(next int) time.Duration {
	if next < 2 {
		return 0
	}
	d := float64(p.InitialInterval) * math.Pow(p.BackoffCoefficient, float64(next-2))
	if d >= float64(p.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxInterval
	}
	return time.Duration(d)
}

// Retryable reports whether an error of kind may be retried under p (ignoring attempts left).
func (p RetryPolicy) Retryable(kind string) bool {
	return !slices.Contains(p.NonRetryable, kind)
}

// Equal reports whether p and q are the same policy after normalization.
func (p RetryPolicy) Equal(q RetryPolicy) bool {
	a, b := p.Normalize(), q.Normalize()
	return a.MaxAttempts == b.MaxAttempts && a.InitialInterval == b.InitialInterval &&
		a.BackoffCoefficient == b.BackoffCoefficient && a.MaxInterval == b.MaxInterval &&
		slices.Equal(a.NonRetryable, b.NonRetryable) && a.OnExhaustion == b.OnExhaustion
}

type retryJSON struct {
	MaxAttempts        int        `json:"max_attempts"`
	InitialInterval    Duration   `json:"initial_interval"`
	BackoffCoefficient float64    `json:"backoff_coefficient"`
	MaxInterval        Duration   `json:"max_interval"`
	NonRetryable       []string   `json:"non_retryable,omitempty"`
	OnExhaustion       Exhaustion `json:"on_exhaustion"`
}

// MarshalJSON encodes durations as strings such as "1s".
func (p RetryPolicy) MarshalJSON() ([]byte, error) {
	key, cacheable := p.cacheKey()
	if cacheable {
		if b, ok := retryEncoded.Load(key); ok {
			return slices.Clone(b.([]byte)), nil
		}
	}
	b, err := json.Marshal(retryJSON{p.MaxAttempts, Duration(p.InitialInterval), p.BackoffCoefficient,
		Duration(p.MaxInterval), p.NonRetryable, p.OnExhaustion})
	if err == nil && cacheable && retryEncodedN.Add(1) <= retryCacheMax {
		retryEncoded.Store(key, slices.Clone(b))
	}
	return b, err
}

// UnmarshalJSON decodes the form written by MarshalJSON.
func (p *RetryPolicy) UnmarshalJSON(b []byte) error {
	if v, ok := retryDecoded.Load(string(b)); ok {
		*p = v.(RetryPolicy)
		p.NonRetryable = slices.Clone(p.NonRetryable)
		return nil
	}
	var j retryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = RetryPolicy{j.MaxAttempts, time.Duration(j.InitialInterval), j.BackoffCoefficient,
		time.Duration(j.MaxInterval), j.NonRetryable, j.OnExhaustion}
	if retryDecodedN.Add(1) <= retryCacheMax {
		v := *p
		v.NonRetryable = slices.Clone(v.NonRetryable)
		retryDecoded.Store(string(b), v)
	}
	return nil
}

// A history repeats the same few retry policies in every step.scheduled event, and encoding or
// decoding one costs nested encoding/json calls (a third of a commit's decoding time): the first
// retryCacheMax distinct encodings are remembered, in both directions. Safe for concurrent use;
// values handed out never share a NonRetryable slice.
var (
	retryDecoded, retryEncoded   sync.Map // JSON string -> RetryPolicy; retryKey -> []byte
	retryDecodedN, retryEncodedN atomic.Int64
)

const retryCacheMax = 1024

// retryKey is a RetryPolicy without its NonRetryable list: comparable.
type retryKey struct {
	maxAttempts          int
	initial, maxInterval time.Duration
	coefficient          float64
	onExhaustion         Exhaustion
}

// cacheKey returns p's key in retryEncoded, and false when p has a NonRetryable list.
func (p RetryPolicy) cacheKey() (retryKey, bool) {
	return retryKey{p.MaxAttempts, p.InitialInterval, p.MaxInterval, p.BackoffCoefficient, p.OnExhaustion}, len(p.NonRetryable) == 0
}
