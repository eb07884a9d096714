// Package storetest is the conformance suite every store.EventStore runs. A change to store
// semantics starts with a change here.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Exercise runs the conformance suite against stores made by newStore. Each subtest calls
// newStore once and uses run IDs unique to it, so a store may be shared between subtests.
func Exercise(t *testing.T, newStore func(t *testing.T) store.EventStore) {
	t.Helper()

	type testBundle struct {
		store store.EventStore
		ctx   context.Context
		run   string
	}
	var runs atomic.Int64
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{store: newStore(t), ctx: t.Context(), run: fmt.Sprintf("conformance-%d", runs.Add(1))}
	}

	t.Run("AppendsAtExpectedSequence", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		last, err := b.store.Append(b.ctx, b.run, 0, started(1))
		require.NoError(t, err)
		require.Equal(t, uint64(1), last)
		last, err = b.store.Append(b.ctx, b.run, 1, signal(2, "a"), signal(3, "b"))
		require.NoError(t, err)
		require.Equal(t, uint64(3), last)

		got, err := b.store.Load(b.ctx, b.run, 0)
		require.NoError(t, err)
		require.Len(t, got, 3)
		for i, e := range got {
			require.Equal(t, b.run, e.RunID)
			require.Equal(t, uint64(i+1), e.Seq)
			require.True(t, e.Time.Equal(at(i+1)), "seq %d time %s", e.Seq, e.Time)
			require.Equal(t, time.UTC, e.Time.Location())
		}
		require.Equal(t, event.TypeRunStarted, got[0].Type())
		require.Equal(t, "b", got[2].Payload.(*event.SignalReceived).DeliveryID)
	})

	t.Run("LoadsOnlyAfterSequence", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		appendN(t, b.store, b.run, 5)
		got, err := b.store.Load(b.ctx, b.run, 3)
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, uint64(4), got[0].Seq)
		require.Equal(t, uint64(5), got[1].Seq)

		got, err = b.store.Load(b.ctx, b.run, 5)
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = b.store.Load(b.ctx, b.run, 99)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("LoadsUnknownRunAsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got, err := b.store.Load(b.ctx, b.run+"-missing", 0)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("RejectsStaleExpectedSeq", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		appendN(t, b.store, b.run, 2)
		_, err := b.store.Append(b.ctx, b.run, 1, signal(2, "late"))
		require.ErrorIs(t, err, store.ErrConflict)
		var ce *store.ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, uint64(1), ce.Expected)

		_, err = b.store.Append(b.ctx, b.run, 0, started(1))
		require.ErrorIs(t, err, store.ErrConflict, "expected 0 on an existing run")
		got, err := b.store.Load(b.ctx, b.run, 0)
		require.NoError(t, err)
		require.Len(t, got, 2, "a conflicting append commits nothing")
	})

	t.Run("RejectsFutureExpectedSeq", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		appendN(t, b.store, b.run, 1)
		_, err := b.store.Append(b.ctx, b.run, 5, signal(6, "x"))
		require.ErrorIs(t, err, store.ErrConflict)
		_, err = b.store.Append(b.ctx, b.run+"-new", 3, started(1))
		require.ErrorIs(t, err, store.ErrConflict, "a missing run is at seq 0")
	})

	t.Run("CommitsMultiEventAppendAtomically", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		appendN(t, b.store, b.run, 1)
		events := []event.Event{signal(2, "a"), signal(3, "b"), signal(4, "c"), signal(5, "d")}
		last, err := b.store.Append(b.ctx, b.run, 1, events...)
		require.NoError(t, err)
		require.Equal(t, uint64(5), last)
		_, err = b.store.Append(b.ctx, b.run, 1, events...)
		require.ErrorIs(t, err, store.ErrConflict)
		got, err := b.store.Load(b.ctx, b.run, 1)
		require.NoError(t, err)
		require.Len(t, got, 4)
		for i, e := range got {
			require.Equal(t, uint64(i+2), e.Seq)
		}
	})

	t.Run("RoundTripsPayloads", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sched := &event.StepScheduled{Steps: []event.StepSpec{
			{ID: "reserve", Name: "reserveStock", Input: json.RawMessage(`{"sku":"sku-8842","qty":2}`),
				Retry: event.RetryPolicy{MaxInterval: time.Minute, InitialInterval: 250 * time.Millisecond}.Normalize()},
			{ID: "charge", Name: "chargeCard", Input: json.RawMessage(`null`), Retry: event.RetryPolicy{
				MaxAttempts: 5, NonRetryable: []string{"card_declined"}, OnExhaustion: event.ExhaustionReturnError}.Normalize()},
		}}
		wait := &event.WaitScheduled{WaitID: "cool", Deadline: at(9).Add(1500 * time.Microsecond), Duration: event.Duration(90 * time.Second)}
		_, err := b.store.Append(b.ctx, b.run, 0, started(1), event.Event{Time: at(2), Payload: sched}, event.Event{Time: at(3), Payload: wait})
		require.NoError(t, err)
		got, err := b.store.Load(b.ctx, b.run, 1)
		require.NoError(t, err)
		require.Equal(t, sched, got[0].Payload)
		gotWait := got[1].Payload.(*event.WaitScheduled)
		require.True(t, wait.Deadline.Equal(gotWait.Deadline))
		require.Equal(t, wait.Duration, gotWait.Duration)
	})

	t.Run("IsolatesRuns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := b.run + "-other"
		appendN(t, b.store, b.run, 3)
		last, err := b.store.Append(b.ctx, other, 0, started(1))
		require.NoError(t, err)
		require.Equal(t, uint64(1), last)
		got, err := b.store.Load(b.ctx, other, 0)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, other, got[0].RunID)
	})

	t.Run("AcceptsDerivedRunIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		child := event.ChildRunID(b.run, "payment")
		_, err := b.store.Append(b.ctx, child, 0, started(1))
		require.NoError(t, err)
		next := event.SuccessorRunID(child, 1)
		_, err = b.store.Append(b.ctx, next, 0, started(1))
		require.NoError(t, err)
		got, err := b.store.Load(b.ctx, next, 0)
		require.NoError(t, err)
		require.Len(t, got, 1)
	})

	t.Run("RejectsInvalidAppends", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tt := range []struct {
			name   string
			run    string
			events []event.Event
			want   error
		}{
			{"EmptyRunID", "", []event.Event{started(1)}, event.ErrInvalidID},
			{"DotInRunID", "order.1", []event.Event{started(1)}, event.ErrInvalidID},
			{"WildcardInRunID", "order>", []event.Event{started(1)}, event.ErrInvalidID},
			{"SpaceInRunID", "order 1", []event.Event{started(1)}, event.ErrInvalidID},
			{"NoEvents", b.run, nil, event.ErrMalformed},
			{"NilPayload", b.run, []event.Event{{Time: at(1)}}, event.ErrMalformed},
			{"NoTime", b.run, []event.Event{{Payload: started(1).Payload}}, event.ErrMalformed},
			{"InvalidPayload", b.run, []event.Event{{Time: at(1), Payload: &event.StepCompleted{}}}, event.ErrMalformed},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, err := b.store.Append(b.ctx, tt.run, 0, tt.events...)
				require.ErrorIs(t, err, tt.want)
			})
		}
		got, err := b.store.Load(b.ctx, b.run, 0)
		require.NoError(t, err)
		require.Empty(t, got, "refused appends commit nothing")
	})

	t.Run("LoadsAtLeastWhatExists", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		appendN(t, b.store, b.run, 4)
		got, err := b.store.LoadAtLeast(b.ctx, b.run, 1, 4)
		require.NoError(t, err)
		require.Len(t, got, 3)
		require.Equal(t, uint64(4), got[2].Seq)
		got, err = b.store.LoadAtLeast(b.ctx, b.run, 0, 9)
		require.NoError(t, err)
		require.Len(t, got, 4, "a run with fewer events yields what it has")
		got, err = b.store.LoadAtLeast(b.ctx, "no-such-"+b.run, 0, 3)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("FollowersSeeEveryCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		f, ok := b.store.(store.Follower)
		if !ok {
			t.Skip("the store does not implement store.Follower")
		}
		commits := make(chan store.Commit, 10)
		stop, err := f.Follow(b.run, func(c store.Commit) { commits <- c })
		require.NoError(t, err)
		appendN(t, b.store, b.run, 1)
		_, err = b.store.Append(b.ctx, b.run, 1, signal(2, "x"), signal(3, "y"))
		require.NoError(t, err)
		_, err = b.store.Append(b.ctx, "other-"+b.run, 0, started(1))
		require.NoError(t, err)
		var got []store.Commit
		for len(got) < 2 {
			select {
			case c := <-commits:
				got = append(got, c)
			case <-time.After(10 * time.Second):
				t.Fatalf("got %d of 2 commit notices", len(got))
			}
		}
		require.Equal(t, [2]uint64{1, 1}, [2]uint64{got[0].First, got[0].Last})
		require.Equal(t, [2]uint64{2, 3}, [2]uint64{got[1].First, got[1].Last})
		envs, err := got[1].Events()
		require.NoError(t, err)
		require.Len(t, envs, 2)
		require.Equal(t, "y", envs[1].Payload.(*event.SignalReceived).DeliveryID)
		stop()
		_, err = b.store.Append(b.ctx, b.run, 3, signal(4, "z"))
		require.NoError(t, err)
		// A notice published before stop returned could still be in flight; none may follow it.
		select {
		case c := <-commits:
			t.Fatalf("a notice of seq %d..%d arrived after stop", c.First, c.Last)
		case <-time.After(50 * time.Millisecond):
		}
	})

	t.Run("ConcurrentWritersOneWinsPerSequence", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		appendN(t, b.store, b.run, 1)
		const writers, rounds = 6, 8
		for round := range rounds {
			expected := uint64(round + 1)
			var wins atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Go(func() {
					_, err := b.store.Append(b.ctx, b.run, expected, signal(int(expected)+1, fmt.Sprintf("r%d-w%d", round, w)))
					switch {
					case err == nil:
						wins.Add(1)
					case !errors.Is(err, store.ErrConflict):
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, int32(1), wins.Load(), "round %d: exactly one writer commits seq %d", round, expected+1)
		}
		got, err := b.store.Load(b.ctx, b.run, 0)
		require.NoError(t, err)
		require.Len(t, got, rounds+1)
		for i, e := range got {
			require.Equal(t, uint64(i+1), e.Seq)
		}
	})
}

var epoch = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return epoch.Add(time.Duration(sec) * time.Second) }

func started(sec int) event.Event {
	return event.Event{Time: at(sec), Payload: &event.RunStarted{Spec: event.Spec{Definition: "conformance"},
		Input: json.RawMessage(`{}`), Seed: "seed"}}
}

func signal(sec int, delivery string) event.Event {
	return event.Event{Time: at(sec), Payload: &event.SignalReceived{Name: "poke", Payload: json.RawMessage(`1`), DeliveryID: delivery}}
}

func appendN(t *testing.T, s store.EventStore, run string, n int) {
	t.Helper()
	_, err := s.Append(t.Context(), run, 0, started(1))
	require.NoError(t, err)
	for i := 2; i <= n; i++ {
		_, err := s.Append(t.Context(), run, uint64(i-1), signal(i, fmt.Sprintf("d%d", i)))
		require.NoError(t, err)
	}
}
