package flow

import (
	"time"

	"github.com/flowrun/flow/internal/api"
)

// RateLimitedError is the refusal of an input by the ingress's limits (docs/ingress.md,
// "Limits"). It wraps ErrRateLimited. The client does not retry it: the caller decides whether
// to wait RetryAfter and send the input again (with the same delivery ID, so that it is
// recorded once).
type RateLimitedError struct {
	// Pending is set when the run holds too many pending inputs (code too_many_pending): it is
	// not consuming its signals or updates, and waiting alone may not help. Else the input was
	// over the rate of its run or of its sender (code rate_limited).
	Pending bool
	// RetryAfter is how long to wait before sending the input again.
	RetryAfter time.Duration
	// Message is the ingress's: what was over which limit.
	Message string
}

func (e *RateLimitedError) Error() string { return "flow: " + e.Message }

func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// rateLimitedError returns the error of a 429 refusal, or nil for another.
func rateLimitedError(e *api.IngressError) error {
	if e.Code != api.CodeRateLimited && e.Code != api.CodeTooManyPending {
		return nil
	}
	return &RateLimitedError{Pending: e.Code == api.CodeTooManyPending, RetryAfter: time.Duration(max(1, e.RetryAfter)) * time.Second, Message: e.Message}
}
