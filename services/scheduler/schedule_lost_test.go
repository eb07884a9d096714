package scheduler_test

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// pause pauses schedule name as the schedule runner's door does (compare-and-set of its entry).
func (e *scheduleEnv) pause(name string) error {
	for range 100 {
		entry, err := e.kv.Get(e.ctx, name)
		if err != nil {
			return err
		}
		var s schedule.Schedule
		if err := json.Unmarshal(entry.Value(), &s); err != nil {
			return err
		}
		if err := s.Pause("n7", time.Now()); err != nil {
			return err
		}
		data, err := json.Marshal(&s)
		if err != nil {
			return err
		}
		if _, err := e.kv.Update(e.ctx, name, data, entry.Revision()); err == nil {
			return nil
		}
	}
	return errors.New("the schedule kept changing under 100 pauses")
}

// TestScheduleBufferedSlotStartedByALostRound is torture finding N7: a cancel_other schedule's
// round starts the run of a slot buffered behind a run that ended, and its state is not stored:
// the pause a client asked for meanwhile wins the compare-and-set ("conflict"), or the
// scheduler dies there and the pause comes before the next round ("crash"). The stored state,
// paused, still holds the slot as buffered, and a paused schedule does not drain a buffered
// slot: the slot's run is live while the state counts nothing running. A trigger under
// cancel_other then must cancel that run and start its own only once it ended, not beside it.
func TestScheduleBufferedSlotStartedByALostRound(t *testing.T) {
	for _, how := range []string{"conflict", "crash"} {
		t.Run(how, func(t *testing.T) {
			e := newScheduleEnv(t)
			// The last slot of the yearly spec, buffered behind a run that has ended since: the
			// next round starts its run (and no other slot comes during the test).
			now := time.Now().UTC()
			slot := time.Date(now.Year(), time.January, 1, 0, 0, 0, 0, time.UTC)
			slotRun := schedule.RunID("n7", event.ScheduleScheduled, slot, "")
			sch, _, err := schedule.New(schedule.Schedule{Name: "n7", Definition: "hold", Spec: yearly, Overlap: schedule.CancelOther}, now)
			require.NoError(t, err)
			sch.State.Cursor = slot
			sch.State.Buffered = []schedule.Pending{{Slot: slot, Kind: event.ScheduleScheduled, RunID: slotRun}}
			data, err := json.Marshal(sch)
			require.NoError(t, err)
			_, err = e.kv.Create(e.ctx, "n7", data)
			require.NoError(t, err)

			f := &fault.Injector{}
			switch how {
			case "conflict":
				// The pause is stored between the round's start of the slot's run and its store
				// of the state, which then loses the compare-and-set and repeats the round.
				var once sync.Once
				paused := make(chan error, 1)
				f.ArmFunc(fault.ScheduleAfterStartBeforeState, 1, func() { once.Do(func() { paused <- e.pause("n7") }) })
				e.scheduler("s1", f, 50*time.Millisecond)
				select {
				case err := <-paused:
					require.NoError(t, err)
				case <-time.After(stateWait):
					t.Fatal("the round did not start the buffered slot's run")
				}
			case "crash":
				// The round fails there and its scheduler stops before repeating it (a failed round
				// is repeated a poll interval later), as if killed; the pause comes before the next.
				f.Arm(fault.ScheduleAfterStartBeforeState, fault.Fail, 0, 0)
				s1 := e.scheduler("s1", f, time.Minute)
				require.Eventually(t, func() bool { return f.Hits(fault.ScheduleAfterStartBeforeState) >= 1 }, stateWait, 5*time.Millisecond)
				require.NoError(t, s1.Stop())
				require.NoError(t, e.pause("n7"))
				e.scheduler("s2", nil, 50*time.Millisecond)
			}
			e.waitFor(slotRun, event.TypeSignalAwaited) // the slot's run is live

			at := time.Now()
			e.trigger("n7", schedule.CancelOther, at, "t1")
			triggerRun := schedule.RunID("n7", event.ScheduleTrigger, at.UTC().Truncate(time.Millisecond), "t1")
			e.waitFor(triggerRun, event.TypeRunStarted)

			slotHist, triggerHist := e.historyOf(slotRun), e.historyOf(triggerRun)
			triggerStarted := triggerHist[0].Time
			end := slices.IndexFunc(slotHist, func(env event.Envelope) bool { return env.Type().Terminal() })
			require.NotEqual(t, -1, end, "the trigger's run %s started at %s beside the slot's run %s, which is live: %v",
				triggerRun, triggerStarted.Format(time.StampMilli), slotRun, eventTypes(slotHist))
			require.IsType(t, &event.RunCancelled{}, slotHist[end].Payload, "run %s: %v", slotRun, eventTypes(slotHist))
			require.False(t, triggerStarted.Before(slotHist[end].Time), "the trigger's run started at %s, before the slot's run ended at %s",
				triggerStarted.Format(time.StampMilli), slotHist[end].Time.Format(time.StampMilli))

			// The state records the slot's action as started, once.
			st := e.waitState("n7", "the trigger's run is recorded", func(st *schedule.State) bool {
				return slices.ContainsFunc(st.Recent, func(a schedule.Action) bool { return a.RunID == triggerRun && a.Outcome == schedule.Started })
			})
			var outcomes []schedule.Outcome
			for _, a := range st.Recent {
				if a.RunID == slotRun {
					outcomes = append(outcomes, a.Outcome)
				}
			}
			require.Equal(t, []schedule.Outcome{schedule.Started}, outcomes, "recent %+v", st.Recent)
			require.Equal(t, []string{triggerRun}, st.Running)
			require.Empty(t, st.Buffered)
		})
	}
}

// historyOf reads run runID's history straight from the history stream (its subject alone).
func (e *scheduleEnv) historyOf(runID string) []event.Envelope {
	e.t.Helper()
	var layout streams.Layout // the test's streams: one history stream
	subject := layout.Subject(runID)
	st, err := e.js.Stream(e.ctx, layout.StreamOf(runID))
	require.NoError(e.t, err)
	info, err := st.Info(e.ctx, jetstream.WithSubjectFilter(subject))
	require.NoError(e.t, err)
	commits := int(info.State.Subjects[subject])
	if commits == 0 {
		return nil
	}
	cons, err := e.js.OrderedConsumer(e.ctx, streams.History, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	require.NoError(e.t, err)
	batch, err := cons.Fetch(commits, jetstream.FetchMaxWait(stateWait))
	require.NoError(e.t, err)
	var out []event.Envelope
	for m := range batch.Messages() {
		c, ok := jsstore.CommitOf(runID, m.Headers(), m.Data())
		require.True(e.t, ok, "a commit of run %s", runID)
		envs, _, err := jsstore.DecodeCommit(runID, c.First, c.Last, m.Data())
		require.NoError(e.t, err)
		out = append(out, envs...)
	}
	require.NoError(e.t, batch.Error())
	return out
}

// waitFor waits until run runID's history holds an event of type typ.
func (e *scheduleEnv) waitFor(runID string, typ event.Type) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		return slices.ContainsFunc(e.historyOf(runID), func(env event.Envelope) bool { return env.Type() == typ })
	}, stateWait, 20*time.Millisecond, "run %s records no %s", runID, typ)
}

func eventTypes(envs []event.Envelope) []event.Type {
	out := make([]event.Type, len(envs))
	for i, env := range envs {
		out[i] = env.Type()
	}
	return out
}
