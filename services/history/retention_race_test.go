package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// requireNoneQuarantined checks that FLOW_DAMAGED lists no run.
func (b *retentionBundle) requireNoneQuarantined(t *testing.T) {
	t.Helper()
	damaged, err := b.js.KeyValue(b.ctx, streams.DamagedBucket)
	require.NoError(t, err)
	keys, err := damaged.ListKeys(b.ctx)
	require.NoError(t, err)
	var ids []string
	for k := range keys.Keys() {
		ids = append(ids, k)
	}
	require.Empty(t, ids, "no run is quarantined")
}

// A deleted run's ID is never taken by another run: a start under it
// follows the reuse policy as for any ended run, and a new run under the ID gets the next reuse
// ID; the record of the deletion keeps the stream's account of what was purged, so a restarted
// history service quarantines nothing.
func TestDeletedRunIDIsNotReused(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	h := b.sweeper(t, archive.ObjectStore, nil)
	b.start(t, h, "await", nil, "live-1") // started before the deletion, running across the restart
	want := b.start(t, h, "short", nil, "x")
	b.clock.advance(2 * time.Hour)
	_, err := h.Sweep(b.ctx)
	require.NoError(t, err)
	b.requireDeleted(t, "x", want)

	_, err = b.client.Start(b.ctx, "short", nil, &flow.StartOptions{RunID: "x"})
	require.ErrorIs(t, err, flow.ErrRunExists, "the deleted run's ID is not taken again")
	require.ErrorContains(t, err, "deleted after its retention period")
	id, err := b.client.Start(b.ctx, "short", nil, &flow.StartOptions{RunID: "x", Reuse: flow.ReuseAllow})
	require.NoError(t, err)
	require.Equal(t, event.ReuseRunID("x", 1), id)
	var out string
	require.NoError(t, b.client.Result(b.ctx, id, &out))
	b.requireRecordOnly(t, "x")
	require.NotNil(t, b.entry(t, "x").Deleted, "the tombstone stays")

	require.NoError(t, h.Stop())
	b.sweeper(t, archive.ObjectStore, nil) // restarted: it checks the stream at start
	b.requireNoneQuarantined(t)
	_, err = b.client.Signal(b.ctx, "live-1", "go", "now", nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Result(b.ctx, "live-1", &out))
}

// A reset and a deletion of one run are ordered by their records in the run: a reset
// recorded first is archived with the run; once the deletion is recorded,
// a reset is refused. No event ever reaches the stream that the purge removes unarchived, and
// no run is quarantined afterwards.
func TestResetRacingDeletionLosesNothing(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)

	// The deletion recorded, its purge not done yet (the sweeper died after its tombstone):
	// a reset is refused.
	f := &fault.Injector{}
	f.Arm(fault.RetentionAfterTombstone, fault.Fail, 0, 0)
	h := b.sweeper(t, archive.ObjectStore, f)
	want := b.start(t, h, "short", nil, "r-1")
	b.clock.advance(2 * time.Hour)
	_, err := h.Sweep(b.ctx)
	require.ErrorIs(t, err, fault.ErrInjected)
	_, err = b.client.Reset(b.ctx, "r-1", &flow.ResetOptions{Seq: 1})
	require.ErrorIs(t, err, flow.ErrRunDeleted)
	require.NoError(t, h.Stop())
	h = b.sweeper(t, archive.ObjectStore, nil) // restarted: its next pass finishes the deletion
	_, err = h.Sweep(b.ctx)
	require.NoError(t, err)
	b.requireDeleted(t, "r-1", want)

	// A reset recorded between the archive and the record: the record fails by optimistic
	// concurrency, and the next pass archives the run with its run.reset.
	f = &fault.Injector{}
	f.Arm(fault.RetentionAfterArchive, fault.Fail, 0, 1)
	require.NoError(t, h.Stop())
	h = b.sweeper(t, archive.ObjectStore, f)
	b.start(t, h, "short", nil, "r-2")
	b.clock.advance(2 * time.Hour)
	_, err = h.Sweep(b.ctx)
	require.ErrorIs(t, err, fault.ErrInjected)
	r, err := b.client.Reset(b.ctx, "r-2", &flow.ResetOptions{Seq: 1})
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(b.ctx, r.NewRunID, &out))
	require.Eventually(t, func() bool {
		sum, ok := h.IndexedEntry("r-2")
		return ok && sum.ResetTo == r.NewRunID
	}, 20*time.Second, 5*time.Millisecond, "the sweeper's index shows the reset")
	b.clock.advance(4 * time.Hour)
	require.Eventually(t, func() bool {
		_, err := h.Sweep(b.ctx)
		require.NoError(t, err)
		sum := b.entry(t, "r-2")
		return sum.Deleted != nil && sum.Deleted.Purged
	}, 20*time.Second, 10*time.Millisecond)
	hist, err := b.client.History(b.ctx, "r-2", 0)
	require.NoError(t, err)
	require.Empty(t, core.Check("r-2", hist), "archive and record read back as one valid history")
	var reset *event.RunReset
	for _, e := range hist {
		if p, ok := e.Payload.(*event.RunReset); ok {
			reset = p
		}
	}
	require.NotNil(t, reset, "the run.reset is archived with the run")
	require.Equal(t, r.NewRunID, reset.NewRunID)

	require.NoError(t, h.Stop())
	b.sweeper(t, archive.ObjectStore, nil)
	b.requireNoneQuarantined(t)
	_, err = b.js.KeyValue(b.ctx, streams.DamagedBucket)
	require.NotErrorIs(t, err, jetstream.ErrBucketNotFound)
}

// Inputs sent to a run that retention deleted after it continued as new follow its chain: a
// signal addressed to the deleted head reaches its live successor, which completes with it.
func TestInputsToADeletedRunFollowItsChain(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	h := b.sweeper(t, archive.ObjectStore, nil)
	_, err := b.client.Start(b.ctx, "relay", 0, &flow.StartOptions{RunID: "head"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { sum, ok := h.IndexedEntry("head"); return ok && sum.Status.Terminal() },
		20*time.Second, 5*time.Millisecond, "the head continued as new, in the sweeper's index")
	hist, err := b.client.Secrets().History(b.ctx, "head", 0)
	require.NoError(t, err)
	b.clock.advance(2 * time.Hour)
	_, err = h.Sweep(b.ctx)
	require.NoError(t, err)
	b.requireDeleted(t, "head", hist)

	got, err := b.client.Signal(b.ctx, "head", "go", "through", nil)
	require.NoError(t, err, "a signal to the deleted head follows its chain")
	require.NotEqual(t, "head", got)
	var out string
	require.NoError(t, b.client.Result(b.ctx, got, &out))
	require.Equal(t, "through", out)
	b.requireNoneQuarantined(t)
}

// A run that replaces another under terminate_existing may reach the history service after
// the run it replaces ended and retention deleted it (the commit applied late, or redelivered
// once its ack was lost): the deleted run needs no termination, and applying the commit goes
// on. Found by the torture test on a 3-node cluster: the lane retried the termination of the
// deleted run forever, and every run of the lane stalled behind it.
func TestReplacingADeletedRunStallsNothing(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	h := b.sweeper(t, archive.ObjectStore, nil)
	hist := b.start(t, h, "short", nil, "x")
	b.clock.advance(2 * time.Hour)
	_, err := h.Sweep(b.ctx)
	require.NoError(t, err)
	b.requireDeleted(t, "x", hist)
	// Services that never read the deleted run apply the commit (the torture test's had just
	// been restarted): nothing cached tells them it ended.
	require.NoError(t, b.main.Stop())
	require.NoError(t, h.Stop())
	h = b.sweeper(t, archive.ObjectStore, nil)

	spec, err := sdk.RuntimeOf(retentionRegistry()).Spec("short", json.RawMessage(`null`))
	require.NoError(t, err)
	st, err := jsstore.New(b.ctx, b.js, nil)
	require.NoError(t, err)
	id := event.ReuseRunID("x", 1)
	_, err = st.Append(b.ctx, id, 0, event.Event{Time: time.Now(), Payload: &event.RunStarted{Spec: spec, Input: json.RawMessage(`null`),
		Seed: "seed", StartPolicy: &event.StartPolicy{OnConflict: event.ConflictTerminateExisting, RunID: "x", Previous: "x", Replaces: true}}})
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(b.ctx, id, &out), "the history service applied the start and sent the run its task")
	require.Equal(t, "done", out)
	require.Eventually(t, func() bool { sum, ok := h.IndexedEntry(id); return ok && sum.Status == core.StatusCompleted },
		20*time.Second, 5*time.Millisecond, "the history service applied every commit of the run")
	b.requireNoneQuarantined(t)
}
