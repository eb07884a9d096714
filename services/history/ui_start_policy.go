package history

import (
	"context"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// startPolicySummary renders what run.started's start policies did, and its delay, for the
// timeline ("" for a plain start).
func startPolicySummary(p *event.RunStarted) string {
	s := ""
	if !p.NotBefore.IsZero() {
		s += ", delayed until " + p.NotBefore.Format("2006-01-02 15:04:05.000")
	}
	sp := p.StartPolicy
	if sp == nil {
		return s
	}
	switch {
	case sp.Replaces:
		s += fmt.Sprintf(", replaces run %s (%s)", sp.Previous, event.ConflictTerminateExisting)
	case sp.Previous != "":
		s += fmt.Sprintf(", reuses ID %s after run %s (reuse %s)", sp.RunID, sp.Previous, sp.Reuse)
	}
	if sp.DedupKey != "" {
		s += fmt.Sprintf(", dedup key %q for %s", sp.DedupKey, time.Duration(sp.DedupWindow))
	}
	if d := sp.Debounce; d != nil {
		s += fmt.Sprintf(", debounce key %q, quiet %s", d.Key, time.Duration(d.Period))
	}
	return s
}

// summarizeDelay renders run.delay_fired and run.debounced.
func summarizeDelay(p event.Payload) string {
	switch p := p.(type) {
	case *event.RunDelayFired:
		return "start delay fired (not before " + p.NotBefore.Format("15:04:05.000") + ")"
	case *event.RunDebounced:
		return fmt.Sprintf("start debounced: input %s, delayed until %s", inline(p.Input), p.NotBefore.Format("2006-01-02 15:04:05.000"))
	}
	return ""
}

// reusedBy returns the latest run that reuses the caller ID of run end after it ended (start
// policies), or "". Runs id=_1..id=_n exist and none after, so a doubling then halving search
// finds n; a run nothing reused costs one direct get (the runs index may lag the commit that
// started a reuse, so the stream is asked). A failed read answers "".
func (s *Service) reusedBy(ctx context.Context, end *core.Snapshot) string {
	if end == nil || end.Outcome == nil || end.Outcome.Outcome == event.OutcomeContinuedAsNew {
		return ""
	}
	id, n, ok := event.ReuseFamily(end.RunID)
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
