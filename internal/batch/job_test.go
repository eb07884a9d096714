package batch_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/filter"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func job(st batch.State, total, cursor int) batch.Job {
	return batch.Job{ID: "j1", Spec: batch.Spec{Op: batch.OpCancel, Where: `status = "running"`}, State: st, CreatedAt: t0,
		Total: total, Chunks: (total + batch.ChunkSize - 1) / batch.ChunkSize, Cursor: cursor}
}

func results(outcomes ...batch.Outcome) []batch.Result {
	out := make([]batch.Result, len(outcomes))
	for i, o := range outcomes {
		out[i] = batch.Result{RunID: fmt.Sprintf("r%d", i), Outcome: o}
		switch o {
		case batch.Skipped:
			out[i].Reason = "already completed"
		case batch.Failed:
			out[i].Reason = "boom"
		}
	}
	return out
}

// TestNext is the job's state machine: every state against every change, with what is allowed
// and what it leaves.
func TestNext(t *testing.T) {
	at := t0.Add(time.Minute)
	type nextCase struct {
		name string
		from batch.Job
		ev   batch.Event
		// want is the state after, or "" when the change is refused.
		want  batch.State
		check func(t *testing.T, j batch.Job)
	}
	cases := []nextCase{
		{"pending resolved", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventResolved, Total: 2500, Chunks: 3}, batch.StateRunning,
			func(t *testing.T, j batch.Job) {
				require.Equal(t, 2500, j.Total)
				require.Equal(t, 3, j.Chunks)
				require.Equal(t, at, j.StartedAt)
			}},
		{"pending resolved to nothing", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventResolved}, batch.StateRunning, nil},
		{"pending resolved with wrong chunks", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventResolved, Total: 2500, Chunks: 2}, "", nil},
		{"pending progress", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventProgress, Results: results(batch.Applied)}, "", nil},
		{"pending completed", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventCompleted}, "", nil},
		{"pending stop requested stops at once", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventStopRequested, Reason: "oops"}, batch.StateStopped,
			func(t *testing.T, j batch.Job) {
				require.True(t, j.StopRequested)
				require.Equal(t, "oops", j.StopReason)
				require.Equal(t, at, j.EndedAt)
			}},
		{"pending stopped without a request", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventStopped}, "", nil},
		{"pending failed", job(batch.StatePending, 0, 0), batch.Event{Kind: batch.EventFailed, Reason: "bad filter"}, batch.StateFailed,
			func(t *testing.T, j batch.Job) { require.Equal(t, "bad filter", j.Error) }},

		{"running resolved again", job(batch.StateRunning, 10, 0), batch.Event{Kind: batch.EventResolved, Total: 10, Chunks: 1}, "", nil},
		{"running progress counts", job(batch.StateRunning, 10, 4),
			batch.Event{Kind: batch.EventProgress, From: 4, Results: results(batch.Applied, batch.Skipped, batch.Failed, batch.Applied)}, batch.StateRunning,
			func(t *testing.T, j batch.Job) {
				require.Equal(t, 8, j.Cursor)
				require.Equal(t, 2, j.Applied)
				require.Equal(t, map[string]int{"already completed": 1}, j.Skipped)
				require.Equal(t, 1, j.Failed)
				require.Equal(t, []batch.Note{{RunID: "r2", Reason: "boom"}}, j.Failures)
				require.Equal(t, []batch.Note{{RunID: "r1", Reason: "already completed"}}, j.Skips)
			}},
		{"running progress from another cursor (a window counted twice)", job(batch.StateRunning, 10, 4),
			batch.Event{Kind: batch.EventProgress, From: 2, Results: results(batch.Applied)}, "", nil},
		{"running progress past the total", job(batch.StateRunning, 10, 8),
			batch.Event{Kind: batch.EventProgress, From: 8, Results: results(batch.Applied, batch.Applied, batch.Applied)}, "", nil},
		{"running progress without an outcome", job(batch.StateRunning, 10, 0),
			batch.Event{Kind: batch.EventProgress, Results: []batch.Result{{RunID: "r0"}}}, "", nil},
		{"running completed early", job(batch.StateRunning, 10, 9), batch.Event{Kind: batch.EventCompleted}, "", nil},
		{"running completed", job(batch.StateRunning, 10, 10), batch.Event{Kind: batch.EventCompleted}, batch.StateCompleted,
			func(t *testing.T, j batch.Job) { require.Equal(t, at, j.EndedAt) }},
		{"running stop requested keeps running", job(batch.StateRunning, 10, 3), batch.Event{Kind: batch.EventStopRequested}, batch.StateRunning,
			func(t *testing.T, j batch.Job) { require.True(t, j.StopRequested) }},
		{"running stopped without a request", job(batch.StateRunning, 10, 3), batch.Event{Kind: batch.EventStopped}, "", nil},
		{"running failed", job(batch.StateRunning, 10, 3), batch.Event{Kind: batch.EventFailed, Reason: "chunk lost"}, batch.StateFailed, nil},
	}
	// A stop requested, then stopped.
	stopping := job(batch.StateRunning, 10, 3)
	stopping.StopRequested = true
	cases = append(cases, nextCase{"stopping stopped", stopping, batch.Event{Kind: batch.EventStopped}, batch.StateStopped,
		func(t *testing.T, j batch.Job) { require.Equal(t, 3, j.Cursor) }})
	// Nothing changes an ended job; a stop request is accepted without effect.
	for _, st := range []batch.State{batch.StateCompleted, batch.StateStopped, batch.StateFailed} {
		for _, k := range []batch.EventKind{batch.EventResolved, batch.EventProgress, batch.EventCompleted, batch.EventStopped, batch.EventFailed} {
			cases = append(cases, nextCase{fmt.Sprintf("%s %s", st, k), job(st, 10, 10), batch.Event{Kind: k, Total: 10, Chunks: 1, From: 10}, "", nil})
		}
		cases = append(cases, nextCase{fmt.Sprintf("%s stop requested", st), job(st, 10, 10), batch.Event{Kind: batch.EventStopRequested}, st,
			func(t *testing.T, j batch.Job) {
				require.False(t, j.StopRequested, "an ended job is left as it is")
				require.True(t, j.UpdatedAt.IsZero())
			}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.ev.At = at
			before, _ := json.Marshal(c.from)
			got, err := batch.Next(c.from, c.ev)
			after, _ := json.Marshal(c.from)
			require.JSONEq(t, string(before), string(after), "Next does not change its argument")
			if c.want == "" {
				require.ErrorIs(t, err, batch.ErrTransition)
				require.Equal(t, c.from.State, got.State)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got.State)
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

// TestNotesAreBounded: the report names at most MaxNotes runs, and counts them all.
func TestNotesAreBounded(t *testing.T) {
	j := job(batch.StateRunning, 500, 0)
	outs := make([]batch.Outcome, 250)
	for i := range outs {
		outs[i] = batch.Failed
	}
	j, err := batch.Next(j, batch.Event{Kind: batch.EventProgress, Results: results(outs...)})
	require.NoError(t, err)
	j, err = batch.Next(j, batch.Event{Kind: batch.EventProgress, From: 250, Results: results(outs...)})
	require.NoError(t, err)
	require.Equal(t, 500, j.Failed)
	require.Len(t, j.Failures, batch.MaxNotes)
}

func TestSpecValidate(t *testing.T) {
	ok := batch.Spec{Op: batch.OpCancel, Where: `status = "running"`}
	for _, c := range []struct {
		name string
		spec batch.Spec
		bad  string
	}{
		{"cancel", ok, ""},
		{"unknown op", batch.Spec{Op: "explode", Where: "x = 1"}, "unknown operation"},
		{"no filter", batch.Spec{Op: batch.OpCancel}, "no filter"},
		{"negative rate", batch.Spec{Op: batch.OpCancel, Where: "x = 1", Rate: -1}, "rate"},
		{"rate too high", batch.Spec{Op: batch.OpCancel, Where: "x = 1", Rate: batch.MaxRate + 1}, "rate"},
		{"signal", batch.Spec{Op: batch.OpSignal, Where: "x = 1", Signal: "poke", Payload: json.RawMessage(`{"a":1}`)}, ""},
		{"signal without a name", batch.Spec{Op: batch.OpSignal, Where: "x = 1"}, "signal name"},
		{"signal with bad JSON", batch.Spec{Op: batch.OpSignal, Where: "x = 1", Signal: "poke", Payload: json.RawMessage(`{`)}, "not valid JSON"},
		{"a signal on a cancel", batch.Spec{Op: batch.OpCancel, Where: "x = 1", Signal: "poke"}, "signal name or payload"},
		{"reset without a mode", batch.Spec{Op: batch.OpReset, Where: "x = 1"}, "needs a mode"},
		{"reset to an unknown point", batch.Spec{Op: batch.OpReset, Where: "x = 1", Reset: &batch.ResetSpec{Mode: "yesterday"}}, "needs a mode"},
		{"reset", batch.Spec{Op: batch.OpReset, Where: "x = 1", Reset: &batch.ResetSpec{Mode: "last_decision"}}, ""},
		{"a reset point on a pause", batch.Spec{Op: batch.OpPause, Where: "x = 1", Reset: &batch.ResetSpec{Mode: "seq"}}, "reset point"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.spec.Validate()
			if c.bad == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, batch.ErrInvalid)
			require.ErrorContains(t, err, c.bad)
		})
	}
	require.EqualValues(t, batch.DefaultRate, ok.EffectiveRate())
}

// TestBucket: the token bucket lets Burst operations start at once, then one every 1/Rate.
func TestBucket(t *testing.T) {
	b := batch.NewBucket(10, 2, t0)
	require.Zero(t, b.Take(t0))
	require.Zero(t, b.Take(t0))
	require.Equal(t, 100*time.Millisecond, b.Take(t0))
	require.Equal(t, 200*time.Millisecond, b.Take(t0), "a token owed is taken: the next waits for the one after")
	// 300 ms later the debt is paid and one token is back.
	require.Zero(t, b.Take(t0.Add(300*time.Millisecond)))
	// A long pause refills to the burst, not beyond.
	later := t0.Add(time.Hour)
	require.Zero(t, b.Take(later))
	require.Zero(t, b.Take(later))
	require.Positive(t, b.Take(later))
	require.Equal(t, 1, batch.BurstFor(5))
	require.Equal(t, 50, batch.BurstFor(500))
}

// TestBucketRate: over a simulated clock, the starts the bucket allows never exceed
// Burst + Rate*t in any interval of length t.
func TestBucketRate(t *testing.T) {
	const rate, burst = 25.0, 3
	b := batch.NewBucket(rate, burst, t0)
	now := t0
	var starts []time.Time
	for range 200 {
		if d := b.Take(now); d > 0 {
			now = now.Add(d)
		}
		starts = append(starts, now)
		now = now.Add(time.Millisecond) // the operation's own cost
	}
	for i := range starts {
		for k := i + 1; k < len(starts); k++ {
			span := starts[k].Sub(starts[i]).Seconds()
			require.LessOrEqual(t, float64(k-i+1), burst+rate*span+1e-9, "starts %d..%d in %.3fs", i, k, span)
		}
	}
	total := starts[len(starts)-1].Sub(starts[0]).Seconds()
	require.InDelta(t, float64(200-burst)/rate, total, 0.3)
}

func TestDeliveryID(t *testing.T) {
	require.Equal(t, "batch:j1:order-1", batch.DeliveryID("j1", "order-1"))
	require.NotEqual(t, batch.DeliveryID("j1", "order-1"), batch.DeliveryID("j2", "order-1"))
	require.NoError(t, batch.ValidateID("cleanup-2026-12-01"))
	require.ErrorIs(t, batch.ValidateID("a.b"), batch.ErrInvalid)
}

func TestSelects(t *testing.T) {
	j := job(batch.StatePending, 0, 0)
	j.Spec.Definition = "order"
	f, err := batch.Compile(j.Spec, filter.Schema{})
	require.NoError(t, err)
	sum := core.Summary{RunID: "r1", Definition: "order", Status: core.StatusRunning, StartedAt: t0.Add(-time.Minute)}
	require.True(t, batch.Selects(&j, f, sum))
	late := sum
	late.StartedAt = t0
	require.False(t, batch.Selects(&j, f, late), "started when the job was created")
	other := sum
	other.Definition = "refund"
	require.False(t, batch.Selects(&j, f, other))
	done := sum
	done.Status = core.StatusCompleted
	require.False(t, batch.Selects(&j, f, done), "the filter")
	gone := sum
	gone.Deleted = &core.Deletion{}
	require.False(t, batch.Selects(&j, f, gone), "a tombstone")
	_, err = batch.Compile(batch.Spec{Op: batch.OpCancel, Where: `nope = 1`}, filter.Schema{})
	require.ErrorIs(t, err, batch.ErrInvalid)
}
