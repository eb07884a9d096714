package history_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// system is a server on a directory of the test's, with a history service, a worker and a
// client, that the test can stop and start again on the same data.
type system struct {
	dir    string
	srv    *natsserver.Server
	h      *history.Service
	w      *worker.Worker
	client *flow.Client
	js     jetstream.JetStream
}

func startSystem(t *testing.T, dir string, withWorker bool) *system {
	t.Helper()
	return startSystemWith(t, dir, withWorker, nil)
}

// startSystemWith is startSystem, with before run on the history service before it starts.
func startSystemWith(t *testing.T, dir string, withWorker bool, before func(*history.Service)) *system {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, Port: -1, Logger: quiet})
	require.NoError(t, err)
	sys := &system{dir: dir, srv: srv}
	t.Cleanup(sys.stop)
	sys.js = natstest.JetStream(t, srv)
	require.NoError(t, streams.Ensure(t.Context(), sys.js, streams.Config{}))
	sys.h, err = history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	if before != nil {
		before(sys.h)
	}
	require.NoError(t, sys.h.Start(t.Context()))
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), Logger: quiet})
	if withWorker {
		sys.w, err = worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet}, registry(""))
		require.NoError(t, err)
		require.NoError(t, sys.w.Start(t.Context()))
	}
	sys.client = newClient(t, srv)
	return sys
}

func (sys *system) stop() {
	if sys.srv == nil {
		return
	}
	if sys.w != nil {
		_ = sys.w.Stop(context.Background())
	}
	_ = sys.h.Stop()
	_ = sys.srv.ShutdownWithin(10 * time.Second)
	sys.srv = nil
}

// truncateHistory cuts FLOW_HISTORY's last message block at the record of stream sequence seq,
// as a crash of the disk under a server would: that message and every later one are lost.
func truncateHistory(t *testing.T, dir string, seq uint64) {
	t.Helper()
	blocks, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", streams.History, "msgs", "*.blk"))
	require.NoError(t, err)
	require.NotEmpty(t, blocks)
	slices.Sort(blocks)
	block := blocks[len(blocks)-1]
	data, err := os.ReadFile(block)
	require.NoError(t, err)
	// A record is its length (4 bytes, little endian, the high bit flags headers), its stream
	// sequence (8 bytes), then the rest.
	for off := 0; off+12 <= len(data); {
		rl := int(binary.LittleEndian.Uint32(data[off:]) &^ (1 << 31))
		if binary.LittleEndian.Uint64(data[off+4:])&^(1<<63) == seq {
			require.NoError(t, os.Truncate(block, int64(off)))
			return
		}
		require.Positive(t, rl)
		off += rl
	}
	t.Fatalf("stream sequence %d is not in %s", seq, block)
}

// A truncated history block loses the last events of a completed run: the history service finds
// it at start, quarantines the run and every run that may have lost events, and nothing serves
// or drives them as if nothing happened, until an operator accepts the damage.
func TestDamagedHistoryIsQuarantined(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	sys := startSystem(t, dir, true)
	napID, err := sys.client.Start(ctx, "nap", time.Hour, &flow.StartOptions{RunID: "napping"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := sys.client.Snapshot(ctx, napID)
		return err == nil && s.Status == flow.StatusSuspended
	}, 20*time.Second, 10*time.Millisecond)
	runID, err := sys.client.Start(ctx, "steps", 2, &flow.StartOptions{RunID: "order-1"})
	require.NoError(t, err)
	require.NoError(t, sys.client.Result(ctx, runID, nil))
	require.Eventually(t, func() bool {
		d, err := sys.client.Describe(ctx, runID, 0)
		return err == nil && d.Entry != nil && d.Entry.Status == flow.StatusCompleted
	}, 20*time.Second, 10*time.Millisecond, "the index records the run completed")
	st, err := sys.js.Stream(ctx, streams.History)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	sys.stop()

	// The run's last two commits (its results and the decisions they allowed, as the worker's
	// pipeline grouped them) are the stream's last two messages.
	truncateHistory(t, dir, info.State.LastSeq-1)
	sys = startSystem(t, dir, false)

	damaged, err := sys.js.KeyValue(ctx, streams.DamagedBucket)
	require.NoError(t, err)
	for _, id := range []string{runID, napID} {
		_, err := damaged.Get(ctx, id)
		require.NoError(t, err, "run %s is quarantined", id)
	}
	_, err = sys.client.History(ctx, runID, 0)
	require.ErrorIs(t, err, flow.ErrDamaged, "a prefix of a 6-event run is not served as a valid history")
	require.Regexp(t, `holds [1-4] events?, but the runs index recorded it completed at seq 6`, err.Error())
	_, err = sys.client.Start(ctx, "steps", 2, &flow.StartOptions{RunID: runID})
	require.ErrorIs(t, err, flow.ErrDamaged, "starting it again would run the order again")
	page, err := sys.client.Runs(ctx, nil)
	require.NoError(t, err)
	for _, r := range page.Runs {
		require.NotEmpty(t, r.Damaged, "run %s is listed as damaged", r.RunID)
	}

	// An operator accepts the damage of the sleeping run: it is served and driven again.
	res, err := sys.client.Resume(ctx, napID, &flow.ResumeOptions{AcceptDamage: true})
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, res.Status)
	_, err = damaged.Get(ctx, napID)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	hist, err := sys.client.History(ctx, napID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(napID, hist))
}

// An index that lost its entries is rebuilt from history when the service starts; so is one
// asked to (flowd history --rebuild), and the rebuilt entries equal fresh projections.
func TestEmptyIndexIsRebuiltFromHistory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	sys := startSystem(t, dir, true)
	var ids []string
	for i := range 5 {
		id, err := sys.client.Start(ctx, "steps", i, nil)
		require.NoError(t, err)
		require.NoError(t, sys.client.Result(ctx, id, nil))
		ids = append(ids, id)
	}
	napID, err := sys.client.Start(ctx, "nap", time.Hour, nil)
	require.NoError(t, err)
	ids = append(ids, napID)
	require.Eventually(t, func() bool {
		page, err := sys.client.Runs(ctx, nil)
		return err == nil && page.Total == len(ids) && page.Runs[0].Status != flow.StatusPending
	}, 20*time.Second, 10*time.Millisecond)
	sys.stop()

	// Purge the runs index and the timer index behind the service's back.
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, Port: -1, Logger: quiet})
	require.NoError(t, err)
	js := natstest.JetStream(t, srv)
	for _, bucket := range []string{streams.RunsBucket, streams.TimersBucket} {
		st, err := js.Stream(ctx, "KV_"+bucket)
		require.NoError(t, err)
		require.NoError(t, st.Purge(ctx))
	}
	require.NoError(t, srv.ShutdownWithin(10*time.Second))

	sys = startSystem(t, dir, false)
	page, err := sys.client.Runs(ctx, &flow.RunsFilter{Limit: 100})
	require.NoError(t, err)
	require.Equal(t, len(ids), page.Total, "every run is indexed again")
	for _, r := range page.Runs {
		hist, err := sys.client.History(ctx, r.RunID, 0)
		require.NoError(t, err)
		s, err := core.Project(r.RunID, hist)
		require.NoError(t, err)
		require.Equal(t, s.Summary(), r)
	}
	timers, err := sys.js.KeyValue(ctx, streams.TimersBucket)
	require.NoError(t, err)
	keys, err := timers.ListKeys(ctx)
	require.NoError(t, err)
	var n int
	for range keys.Keys() {
		n++
	}
	require.Equal(t, 1, n, "the sleeping run's timer is registered again")
}

// The quarantine list (FLOW_DAMAGED) is what decides whether a run is damaged; its runs index
// entry only shows it. A crash between the two writes of a quarantine, or of its release, leaves
// them apart: the service brings the entries in line when it starts.
func TestIndexShowsTheQuarantineAfterACrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	sys := startSystem(t, dir, true)
	for _, id := range []string{"quarantined", "released"} {
		_, err := sys.client.Start(ctx, "steps", 1, &flow.StartOptions{RunID: id})
		require.NoError(t, err)
		require.NoError(t, sys.client.Result(ctx, id, nil))
		require.Eventually(t, func() bool {
			d, err := sys.client.Describe(ctx, id, 0)
			return err == nil && d.Entry != nil && d.Entry.Status == flow.StatusCompleted
		}, 20*time.Second, 10*time.Millisecond)
	}
	sys.stop()

	// What each crash leaves: "quarantined" is in FLOW_DAMAGED, but its entry was not marked
	// yet; "released" was taken off FLOW_DAMAGED, but its entry still says it is damaged.
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, Port: -1, Logger: quiet})
	require.NoError(t, err)
	js := natstest.JetStream(t, srv)
	damaged, err := js.KeyValue(ctx, streams.DamagedBucket)
	require.NoError(t, err)
	b, err := json.Marshal(jsstore.Damaged{RunID: "quarantined", Reason: "lost its tail", DetectedAt: time.Now().UTC()})
	require.NoError(t, err)
	_, err = damaged.Put(ctx, "quarantined", b)
	require.NoError(t, err)
	runs, err := js.KeyValue(ctx, streams.RunsBucket)
	require.NoError(t, err)
	e, err := runs.Get(ctx, "released")
	require.NoError(t, err)
	var sum core.Summary
	require.NoError(t, json.Unmarshal(e.Value(), &sum))
	sum.Damaged = "lost its tail"
	b, err = json.Marshal(sum)
	require.NoError(t, err)
	_, err = runs.Update(ctx, "released", b, e.Revision())
	require.NoError(t, err)
	require.NoError(t, srv.ShutdownWithin(10*time.Second))

	// Listings answer from the service's copy of the runs index, which follows a watch: slowed
	// down here, as under load, it shows the repairs only after Start returned, unless Start
	// waits for it.
	sys = startSystemWith(t, dir, false, func(h *history.Service) {
		h.SetBeforeIndexApply(func() { time.Sleep(500 * time.Millisecond) })
	})
	page, err := sys.client.Runs(ctx, nil)
	require.NoError(t, err)
	shown := map[string]string{}
	for _, r := range page.Runs {
		shown[r.RunID] = r.Damaged
	}
	require.Equal(t, map[string]string{"quarantined": "lost its tail", "released": ""}, shown)
}
