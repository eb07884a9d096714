package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// continueAs makes run id end and go on in run next (a continuation, or the new run of a
// reset).
func (w *world) continueAs(id, next string) {
	w.t.Helper()
	require.Equal(w.t, RunActive, w.runs[id], "run %s", id)
	w.runs[id], w.runs[next], w.next[id] = RunEnded, RunActive, next
}

// TestChainReadFromLatest: a round records the latest run of a running run's chain, and reads
// the chain from there: once the run the schedule started is deleted (state finds nothing of
// it), the chain, which went on since (a reset), still counts as active (skip), and it ends
// when its latest run ends.
func TestChainReadFromLatest(t *testing.T) {
	w := newWorld(t, minutely(Skip), "2026-06-01T10:00:30Z")
	w.at("2026-06-01T10:01:00Z")
	first := id("10:01")
	w.continueAs(first, first+"=1")
	w.at("2026-06-01T10:01:10Z") // a poll round
	require.Equal(t, map[string]string{first: first + "=1"}, w.s.State.Current)
	w.continueAs(first+"=1", first+"=_reset-1")
	w.deleted[first] = true
	w.at("2026-06-01T10:02:00Z")
	require.Equal(t, "10:01:started 10:02:skipped", w.outcomes())
	require.Equal(t, []string{first}, w.s.State.Running)
	require.Equal(t, first+"=_reset-1", w.s.State.CurrentRun(first))

	w.end(first + "=_reset-1")
	w.at("2026-06-01T10:02:10Z")
	require.Empty(t, w.s.State.Running)
	require.Nil(t, w.s.State.Current)
	w.at("2026-06-01T10:03:00Z")
	w.wantStarted(first, id("10:03"))
}

// TestChainEffectsNameLatest: cancel_other and terminate_other cancel and terminate the latest
// run of each running chain, not the run the schedule started.
func TestChainEffectsNameLatest(t *testing.T) {
	for _, policy := range []Overlap{CancelOther, TerminateOther} {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(t, minutely(policy), "2026-06-01T10:00:30Z")
			w.at("2026-06-01T10:01:00Z")
			first := id("10:01")
			w.continueAs(first, first+"=1")
			w.at("2026-06-01T10:01:10Z")
			w.deleted[first] = true
			w.at("2026-06-01T10:02:00Z")
			switch policy {
			case CancelOther:
				require.Equal(t, []string{first + "=1"}, w.cancelled)
				w.end(first + "=1")
				w.at("2026-06-01T10:02:10Z")
			case TerminateOther:
				require.Equal(t, []string{first + "=1"}, w.terminated)
			}
			w.wantStarted(first, id("10:02"))
		})
	}
}

// TestWakePollsWhileRunning: a schedule looks at its runs every poll interval while one is
// active, not only at its next slot.
func TestWakePollsWhileRunning(t *testing.T) {
	w := newWorld(t, minutely(Skip), "2026-06-01T10:00:30Z")
	_, _, poll := w.s.Wake(w.tm, w.now)
	require.False(t, poll, "nothing runs")
	w.at("2026-06-01T10:01:00Z")
	_, _, poll = w.s.Wake(w.tm, w.now)
	require.True(t, poll, "a run is active")
	w.end(id("10:01"))
	w.at("2026-06-01T10:01:10Z")
	_, _, poll = w.s.Wake(w.tm, w.now)
	require.False(t, poll, "the run ended")
}
