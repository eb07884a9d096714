package history

import (
	"context"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// reusable reports whether a run may reuse the caller ID of run end after it: end is an end, and
// not a continuation's (the successor carries the ID on).
func reusable(end *core.Snapshot) bool {
	return end != nil && end.Outcome != nil && end.Outcome.Outcome != event.OutcomeContinuedAsNew
}

// reuser returns the latest run that reuses the caller ID of run runID (id=_1, id=_2, ...), or
// "". Runs id=_1..id=_n exist and none after, so a doubling then halving search finds n; a run
// nothing reused costs one direct get (the runs index may lag the commit that started a reuse,
// so the stream is asked). A failed read answers "".
func (s *Service) reuser(ctx context.Context, runID string) string {
	id, n, ok := event.ReuseFamily(runID)
	if !ok {
		return ""
	}
	failed := false
	exists := func(k int) bool {
		if _, ok := s.index.get(event.ReuseRunID(id, k)); ok {
			return true
		}
		last, err := s.store.LastCommit(ctx, event.ReuseRunID(id, k))
		failed = failed || err != nil
		return err == nil && len(last) > 0
	}
	lo, hi := n, n+1
	for exists(hi) {
		lo, hi = hi, hi+max(1, hi-n)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if exists(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo <= n || failed {
		return ""
	}
	return event.ReuseRunID(id, lo)
}
