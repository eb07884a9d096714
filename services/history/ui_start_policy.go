package history

import (
	"fmt"
	"time"

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
