package core_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// delayed returns a history whose run is delayed until epoch+1m.
func delayed(t *testing.T) *history {
	h := &history{t: t, run: "later", now: epoch}
	return h.add(&event.RunStarted{Spec: event.Spec{Definition: "test"}, Input: json.RawMessage(`1`), Seed: "s", NotBefore: epoch.Add(time.Minute)})
}

func TestStartDelayProjection(t *testing.T) {
	t.Parallel()
	h := delayed(t)
	s := h.snapshot()
	require.True(t, s.Delayed)
	require.Equal(t, core.StatusSuspended, s.Status)
	require.Equal(t, []core.Timer{{RunID: "later", Kind: core.TimerStart, ID: "1", Due: epoch.Add(time.Minute), Seq: 1}}, core.Timers(s))
	require.Equal(t, "start.1", core.Timers(s)[0].Key())

	v, err := core.Decide(s, always(core.Complete{Output: json.RawMessage(`1`)}), core.DecideOptions{})
	require.NoError(t, err)
	require.True(t, v.Waiting(), "no decision while delayed")
	require.Contains(t, v.WaitingOn, "start delay until")

	// run.debounced moves the delay and the input; the old timer is stale.
	evs, err := core.Debounce(s, []byte(` { "v" : 2 } `), epoch.Add(2*time.Minute), "")
	require.NoError(t, err)
	h.add(evs...)
	s = h.snapshot()
	require.JSONEq(t, `{"v":2}`, string(s.Input))
	require.Equal(t, 1, s.Debounced)
	old := core.Timer{RunID: "later", Kind: core.TimerStart, ID: "1", Seq: 1}
	_, err = core.Fire(s, old)
	require.ErrorIs(t, err, core.ErrStale)
	timers := core.Timers(s)
	require.Equal(t, []core.Timer{{RunID: "later", Kind: core.TimerStart, ID: "2", Due: epoch.Add(2 * time.Minute), Seq: 2}}, timers)
	c := core.Derive(s, h.envs[1:])
	require.Equal(t, timers, c.Timers)
	require.False(t, c.Resume)

	// A quiet period never ends earlier than one already recorded.
	evs, err = core.Debounce(s, []byte(`3`), epoch, "")
	require.NoError(t, err)
	require.Equal(t, epoch.Add(2*time.Minute), evs[0].(*event.RunDebounced).NotBefore)

	fired, err := core.Fire(s, timers[0])
	require.NoError(t, err)
	require.Equal(t, []event.Payload{&event.RunDelayFired{NotBefore: epoch.Add(2 * time.Minute)}}, fired)
	h.add(fired...)
	s = h.snapshot()
	require.False(t, s.Delayed)
	require.Equal(t, core.StatusPending, s.Status)
	c = core.Derive(s, h.envs[2:])
	require.True(t, c.Resume, "run.delay_fired asks for the first decision")
	_, err = core.Fire(s, timers[0])
	require.ErrorIs(t, err, core.ErrStale, "fired once")
	_, err = core.Debounce(s, []byte(`4`), epoch.Add(time.Hour), "")
	require.ErrorIs(t, err, core.ErrStale, "past the delay, a start needs a run of its own")
	require.Empty(t, core.Timers(s))
}

// Terminating a delayed run makes its start timer moot; debouncing it is refused.
func TestDelayedRunTerminated(t *testing.T) {
	t.Parallel()
	h := delayed(t)
	evs, err := core.Terminate(h.snapshot(), "no longer needed")
	require.NoError(t, err)
	h.add(evs...)
	s := h.snapshot()
	require.Equal(t, core.StatusFailed, s.Status)
	c := core.Derive(s, h.envs[1:])
	require.Equal(t, []core.Timer{{RunID: "later", Kind: core.TimerStart, ID: "1", Due: epoch.Add(time.Minute), Seq: 1}}, c.Moot)
	_, err = core.Debounce(s, []byte(`1`), epoch, "")
	require.ErrorIs(t, err, core.ErrTerminal)
}

// A cancellation request ends a delayed run at once, as cancelled: its code never ran.
func TestDelayedRunCancelled(t *testing.T) {
	t.Parallel()
	h := delayed(t)
	evs, err := core.RequestCancel(h.snapshot(), "not needed")
	require.NoError(t, err)
	h.add(evs...)
	s := h.snapshot()
	require.True(t, core.Derive(s, h.envs[1:]).Resume, "the request is driven")
	v, err := core.Decide(s, always(core.Complete{Output: json.RawMessage(`1`)}), core.DecideOptions{})
	require.NoError(t, err)
	require.Equal(t, []event.Payload{&event.RunCancelled{Reason: "not needed", Cause: event.CauseCancelRequested}}, v.Events)
	h.add(v.Events...)
	s = h.snapshot()
	require.Equal(t, core.StatusCancelled, s.Status)
	require.Empty(t, core.Check(h.run, h.envs))
	require.Len(t, core.Derive(s, h.envs[2:]).Moot, 1, "its start timer is moot")
}

// The invariants of a delay: no decision before run.delay_fired, and run.delay_fired and
// run.debounced only while the run is delayed.
func TestStartDelayInvariants(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		delay   bool
		events  []event.Payload
		wantSeq uint64
	}{
		{"a decision before the delay fired", true, []event.Payload{&event.WaitScheduled{WaitID: "w", Deadline: epoch}}, 2},
		{"a completion before the delay fired", true, []event.Payload{&event.RunCompleted{Output: json.RawMessage(`1`)}}, 2},
		{"a delay fired twice", true, []event.Payload{&event.RunDelayFired{NotBefore: epoch}, &event.RunDelayFired{NotBefore: epoch}}, 3},
		{"a delay fired on a run that has none", false, []event.Payload{&event.RunDelayFired{NotBefore: epoch}}, 2},
		{"a debounce after the delay fired", true, []event.Payload{&event.RunDelayFired{NotBefore: epoch},
			&event.RunDebounced{Input: json.RawMessage(`1`), NotBefore: epoch}}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHistory(t, "r", event.Spec{})
			if c.delay {
				h = delayed(t)
			}
			h.add(c.events...)
			vs := core.Check(h.run, h.envs)
			require.Len(t, vs, 1, "%v", vs)
			require.Equal(t, "start_delay", vs[0].Rule)
			require.Equal(t, c.wantSeq, vs[0].Seq)
		})
	}
	// Signals, cancellation requests and an operator's termination are not decisions.
	h := delayed(t).add(&event.SignalReceived{Name: "poke", Payload: json.RawMessage(`1`), DeliveryID: "d"},
		&event.RunCancelRequested{Reason: "r"}, &event.RunFailed{Error: event.ErrorInfo{Kind: "terminated", Message: "x"}, Cause: event.CauseOperator})
	require.Empty(t, core.Check(h.run, h.envs))
}
