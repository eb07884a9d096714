package scheduler

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/pkg/event"
)

// preloadDelay is how far ahead the preload tests' timers fall due: within the preload window,
// and long enough for the test to act on the run between the preload and the firing (the
// tests do not depend on it for their outcome).
const preloadDelay = 700 * time.Millisecond

// otherWriter returns an engine on srv, as another process has one.
func otherWriter(t *testing.T, srv *natsserver.Server, f *timerFixture) *engine.Engine {
	t.Helper()
	host, err := jshost.New(t.Context(), natstest.JetStream(t, srv), "flow/test", natstest.Logger())
	require.NoError(t, err)
	e, err := engine.New(engine.Config{Store: f.st, Host: host, Logger: natstest.Logger()})
	require.NoError(t, err)
	return e
}

// preloaded waits until the scheduler has read the tail of run runID ahead of its timer.
func preloaded(t *testing.T, s *Scheduler, runID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, _, ok := s.store.Position(runID)
		return ok
	}, 10*time.Second, time.Millisecond, "the scheduler preloads run %s", runID)
}

// history returns the checked history of run runID.
func (f *timerFixture) history(t *testing.T, runID string) []event.Envelope {
	t.Helper()
	hist, err := f.st.Load(t.Context(), runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	return hist
}

// entryGone reports whether the timer entry of wait waitID of run runID is deleted.
func (f *timerFixture) entryGone(t *testing.T, runID, waitID string) bool {
	_, err := f.timers.Get(t.Context(), timerindex.Key(core.Timer{RunID: runID, Kind: core.TimerWait, ID: waitID}))
	return errors.Is(err, jetstream.ErrKeyNotFound)
}

func countFired(hist []event.Envelope) int {
	n := 0
	for _, e := range hist {
		if e.Type() == event.TypeWaitFired {
			n++
		}
	}
	return n
}

// A run that moves on between the preload of its timer and the firing (another process appends
// to it) is caught by the firing's expected sequence: the timer fires once, after the other
// event, or not at all if the other event fired it or ended the run; the entry goes either way.
func TestPreloadedTimerOfARunThatMovedOn(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		other func(t *testing.T, e *engine.Engine, runID string)
		fires bool
	}{
		{"signal", func(t *testing.T, e *engine.Engine, runID string) {
			_, err := e.Signal(t.Context(), runID, "ping", []byte(`1`), "d1")
			require.NoError(t, err)
		}, true},
		{"fired elsewhere", func(t *testing.T, e *engine.Engine, runID string) {
			s, err := e.Snapshot(t.Context(), runID)
			require.NoError(t, err)
			require.NoError(t, e.Fire(t.Context(), core.Timers(s)[0]))
		}, false},
		{"terminated", func(t *testing.T, e *engine.Engine, runID string) {
			_, err := e.Terminate(t.Context(), runID, "test")
			require.NoError(t, err)
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.RunJetStream(t)
			f := newTimerFixture(t, srv)
			f.waitingRun(t, "r", "w", time.Now().Add(preloadDelay))
			s := startScheduler(t, srv, "only")
			preloaded(t, s, "r")
			tt.other(t, otherWriter(t, srv, f), "r")
			before := f.history(t, "r")

			require.Eventually(t, func() bool { return f.entryGone(t, "r", "w") }, 10*time.Second, 10*time.Millisecond,
				"the timer entry is deleted once fired or found moot")
			hist := f.history(t, "r")
			require.LessOrEqual(t, countFired(hist), 1)
			if tt.fires {
				require.Len(t, hist, len(before)+1)
				require.Equal(t, event.TypeWaitFired, hist[len(hist)-1].Type(), "fired after the other event")
			} else {
				require.Len(t, hist, len(before), "found moot")
			}
		})
	}
}

// A fault at each point of a preloaded firing (before its append, between the append and the
// resume task, between the firing and the entry's deletion) loses nothing: the timer fires
// exactly once and its entry goes.
func TestPreloadedFiringFaults(t *testing.T) {
	t.Parallel()
	for _, p := range []fault.Point{fault.StoreAppend, fault.AfterAppendBeforeTask, fault.TaskPublish} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			srv := natstest.RunJetStream(t)
			f := newTimerFixture(t, srv)
			f.waitingRun(t, "r", "w", time.Now().Add(preloadDelay))
			faults := &fault.Injector{}
			faults.Arm(p, fault.Fail, 0, 1)
			s := startSchedulerWith(t, srv, Config{Faults: faults, Streams: streams.Config{LeaseTTL: time.Second}})
			preloaded(t, s, "r")

			require.Eventually(t, func() bool { return f.entryGone(t, "r", "w") }, 10*time.Second, 10*time.Millisecond,
				"the timer entry is deleted once the firing is committed")
			// The commit is stored (and its entry deleted) before the append's ack reaches the
			// scheduler, which hits the points after the append only then.
			require.Eventually(t, func() bool { return faults.Hits(p) > 0 }, 10*time.Second, time.Millisecond,
				"the firing reaches %s", p)
			require.Equal(t, 1, countFired(f.history(t, "r")), "fired once")
		})
	}
}
