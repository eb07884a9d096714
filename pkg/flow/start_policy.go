package flow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// ConflictPolicy says what a start does when its run ID's latest run is active.
type ConflictPolicy = event.ConflictPolicy

// Conflict policies (docs/start-policies.md).
const (
	ConflictFail              = event.ConflictFail
	ConflictUseExisting       = event.ConflictUseExisting
	ConflictTerminateExisting = event.ConflictTerminateExisting
)

// ReusePolicy says whether a start may reuse the run ID of a run that ended.
type ReusePolicy = event.ReusePolicy

// Reuse policies (docs/start-policies.md).
const (
	ReuseRefuse          = event.ReuseRefuse
	ReuseAllow           = event.ReuseAllow
	ReuseAllowFailedOnly = event.ReuseAllowFailedOnly
)

// Debounce collapses the starts with the same Key (per definition) within a quiet period of
// Period into one run, started once Period has passed since the latest of them, with the
// latest one's input. Every start returns that run's ID.
type Debounce struct {
	// Key groups the starts to collapse; required.
	Key string
	// Period is the quiet period: the run starts once no start with Key came for Period.
	Period time.Duration
}

// policyExtensions adds o's start policies to ext, the CloudEvents extensions of a start, and a
// fresh request ID, so that the client's retries of this call are answered with the run it
// started.
func (o *StartOptions) policyExtensions(ext map[string]string) error {
	if o.OnConflict == "" && o.Reuse == "" && o.Delay == 0 && o.DedupKey == "" && o.DedupWindow == 0 && o.Debounce == nil {
		return nil
	}
	switch {
	case !o.OnConflict.Valid():
		return fmt.Errorf("%w: conflict policy %q is not one of fail, use_existing, terminate_existing", ErrInvalidInput, o.OnConflict)
	case !o.Reuse.Valid():
		return fmt.Errorf("%w: reuse policy %q is not one of refuse, allow, allow_failed_only", ErrInvalidInput, o.Reuse)
	case o.Delay < 0:
		return fmt.Errorf("%w: start delay %v is negative", ErrInvalidInput, o.Delay)
	}
	set := func(k, v string) {
		if v != "" {
			ext[k] = v
		}
	}
	dur := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	set(api.ExtOnConflict, string(o.OnConflict))
	set(api.ExtReuse, string(o.Reuse))
	set(api.ExtDelay, dur(o.Delay))
	set(api.ExtDedupKey, o.DedupKey)
	set(api.ExtDedupWindow, dur(o.DedupWindow))
	if o.Debounce != nil {
		set(api.ExtDebounceKey, o.Debounce.Key)
		set(api.ExtDebouncePeriod, dur(o.Debounce.Period))
	}
	ext[api.ExtRequestID] = nuid.Next()
	return nil
}

// LatestRun returns the latest run of run ID runID: the last continuation of the latest run
// that reuses its ID (start policies), or of runID itself. Signals, cancels and Result
// addressed to runID reach that run. An unknown run is an error wrapping ErrNotFound.
func (c *Client) LatestRun(ctx context.Context, runID string) (string, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return "", err
	}
	for range 1000 {
		s, err := c.Snapshot(ctx, runID)
		if err != nil {
			return "", err
		}
		if s.Status == StatusContinuedAsNew {
			next := s.Outcome.SuccessorRunID
			if _, err := c.Snapshot(ctx, next); errors.Is(err, ErrNotFound) {
				return runID, nil // its successor is not started yet
			}
			runID = next
			continue
		}
		if !s.Status.Terminal() {
			return runID, nil
		}
		next, ok, err := c.laterReuse(ctx, runID)
		if err != nil || !ok {
			return runID, err
		}
		runID = next
	}
	return "", fmt.Errorf("run %q: too many runs follow it", runID)
}

// laterReuse returns the latest run that reuses the caller ID of run runID after it, if any
// (see engine.lastReuse: runs ID=_1..ID=_n exist and none after).
func (c *Client) laterReuse(ctx context.Context, runID string) (string, bool, error) {
	id, n, ok := event.ReuseFamily(runID)
	if !ok {
		return "", false, nil
	}
	exists := func(k int) (bool, error) {
		_, _, err := c.HistoryPage(ctx, event.ReuseRunID(id, k), 0, 1)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	lo := n // exists, or is the ID itself
	hi := n + 1
	for {
		ok, err := exists(hi)
		if err != nil {
			return "", false, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi+max(1, hi-n)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return "", false, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo <= n {
		return "", false, nil
	}
	return event.ReuseRunID(id, lo), true, nil
}
