package history_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
)

// virtualClock is the sweeper's clock: real time moved ahead by a settable offset.
type virtualClock struct{ ahead atomic.Int64 }

func (c *virtualClock) Now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *virtualClock) advance(d time.Duration) { c.ahead.Store(int64(d)) }

// retentionRegistry: "short" (kept an hour after its end), "steps" (the default retention) and
// "await" (waits for a signal: a run that does not end).
func retentionRegistry() *flow.Registry {
	reg := registry("")
	flow.RegisterWorkflow(reg, "short", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.Complete("done"), nil
	}, flow.WithRetention(time.Hour))
	flow.RegisterWorkflow(reg, "leaver", func(ctx *flow.Context, _ any) (flow.Decision, error) {
		return ctx.StartChild("c", "await", nil, flow.WithCancelPolicy(flow.CancelPolicyAbandon)), nil
	}, flow.WithRetention(time.Hour))
	// relay continues as new once, at once; its successor waits for signal "go" and completes
	// with it.
	flow.RegisterWorkflow(reg, "relay", func(ctx *flow.Context, gen int) (flow.Decision, error) {
		if gen == 0 {
			return ctx.ContinueAsNew(1), nil
		}
		if v := ctx.Signal("go"); v != nil {
			return ctx.Complete(v), nil
		}
		return ctx.AwaitSignal("go", "go"), nil
	}, flow.WithRetention(time.Hour))
	return reg
}

type retentionBundle struct {
	srv    *natsserver.Server
	js     jetstream.JetStream
	client *flow.Client
	clock  *virtualClock
	ctx    context.Context
	// main is the history service that consumes beside the sweepers.
	main *history.Service
}

// setupRetention starts a server, a history service that consumes (its sweeper, reconciler and
// payload collector disabled, so that it does not take the retention lease), an ingress and a
// worker of retentionRegistry.
func setupRetention(t *testing.T) *retentionBundle {
	t.Helper()
	srv := natstest.RunJetStream(t)
	b := &retentionBundle{srv: srv, js: natstest.JetStream(t, srv), clock: &virtualClock{}}
	b.main, b.client = startEnv(t, srv, history.Config{RetentionSweep: -1, ReconcileInterval: -1, PayloadGCInterval: -1}, retentionRegistry())
	var cancel context.CancelFunc
	b.ctx, cancel = context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return b
}

// sweeper starts a history service that sweeps only when the test says (Sweep), by the
// bundle's clock, with a default retention of a day.
func (b *retentionBundle) sweeper(t *testing.T, archiveSpec string, faults *fault.Injector) *history.Service {
	t.Helper()
	return historytest.Start(t, history.Config{Conn: natstest.Connect(t, b.srv), HTTPAddr: "127.0.0.1:0", Logger: quiet, RetentionSweep: -1,
		Retention: 24 * time.Hour, Archive: archiveSpec, Clock: b.clock.Now, Faults: faults})
}

// start starts a run and, for a definition that ends at once, waits until sweeper's copy of the
// index shows its end; for "await", until it is suspended. It returns the run's history.
func (b *retentionBundle) start(t *testing.T, h *history.Service, definition string, input any, runID string) []event.Envelope {
	t.Helper()
	_, err := b.client.Start(b.ctx, definition, input, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	want := core.StatusCompleted
	if definition == "await" {
		want = core.StatusSuspended
	}
	require.Eventually(t, func() bool { sum, ok := h.IndexedEntry(runID); return ok && sum.Status == want },
		20*time.Second, 5*time.Millisecond, "run %s reaches %s in the sweeper's index", runID, want)
	hist, err := b.client.Secrets().History(b.ctx, runID, 0)
	require.NoError(t, err)
	return hist
}

// stored returns how many messages FLOW_HISTORY holds on run runID's subject.
func (b *retentionBundle) stored(t *testing.T, runID string) uint64 {
	t.Helper()
	st, err := b.js.Stream(b.ctx, streams.History)
	require.NoError(t, err)
	info, err := st.Info(b.ctx, jetstream.WithSubjectFilter(streams.Layout{}.Subject(runID)))
	require.NoError(t, err)
	return info.State.Subjects[streams.Layout{}.Subject(runID)]
}

func (b *retentionBundle) entry(t *testing.T, runID string) core.Summary {
	t.Helper()
	kv, err := b.js.KeyValue(b.ctx, streams.RunsBucket)
	require.NoError(t, err)
	e, err := kv.Get(b.ctx, runID)
	require.NoError(t, err)
	sum, err := decodeSummary(e.Value())
	require.NoError(t, err)
	return sum
}

func decodeSummary(b []byte) (core.Summary, error) {
	var sum core.Summary
	err := json.Unmarshal(b, &sum)
	return sum, err
}

// listed returns the run IDs a listing returns.
func (b *retentionBundle) listed(t *testing.T, includeDeleted bool) map[string]*core.Deletion {
	t.Helper()
	page, err := b.client.Runs(b.ctx, &flow.RunsFilter{IncludeDeleted: includeDeleted, Limit: 1000})
	require.NoError(t, err)
	out := map[string]*core.Deletion{}
	for _, r := range page.Runs {
		out[r.RunID] = r.Deleted
	}
	return out
}

// restartedSweepDeletes starts a sweeper as a restarted process would (it finishes a recorded
// deletion at start), sweeps, checks that run runID, whose history was want, is deleted
// (requireDeleted), and stops the sweeper.
func (b *retentionBundle) restartedSweepDeletes(t *testing.T, runID string, want []event.Envelope) {
	t.Helper()
	h := b.sweeper(t, archive.ObjectStore, nil)
	_, err := h.Sweep(b.ctx)
	require.NoError(t, err)
	b.requireDeleted(t, runID, want)
	require.NoError(t, h.Stop())
}

// requireDeleted checks that run runID's history is gone from FLOW_HISTORY, that its tombstone
// says so, and that Client.History reads the same events from its archive.
func (b *retentionBundle) requireDeleted(t *testing.T, runID string, want []event.Envelope) {
	t.Helper()
	require.Eventually(t, func() bool { sum := b.entry(t, runID); return sum.Deleted != nil && sum.Deleted.Purged },
		20*time.Second, 5*time.Millisecond, "run %s's deletion is finished", runID)
	rec := b.requireRecordOnly(t, runID)
	want = append(want[:len(want):len(want)], rec)
	sum := b.entry(t, runID)
	require.NotNil(t, sum.Deleted, "run %s has a tombstone", runID)
	require.True(t, sum.Deleted.Purged)
	ended, err := core.Project(runID, want[:len(want)-1])
	require.NoError(t, err)
	require.Equal(t, ended.Status, sum.Status, "the tombstone keeps the summary")
	require.Contains(t, sum.Deleted.Reason, "retention")
	require.NotEmpty(t, sum.Deleted.Archive)
	got, err := b.client.Secrets().History(b.ctx, runID, 0)
	require.NoError(t, err)
	require.Equal(t, encoded(t, want), encoded(t, got), "the archive holds the whole history of %s", runID)
	d, err := b.client.Deletion(b.ctx, runID)
	require.NoError(t, err)
	require.Equal(t, sum.Deleted.Archive, d.Archive)
}

// requireRecordOnly checks that FLOW_HISTORY holds one message of run runID, its run.deleted,
// and returns that record.
func (b *retentionBundle) requireRecordOnly(t *testing.T, runID string) event.Envelope {
	t.Helper()
	require.Equal(t, uint64(1), b.stored(t, runID), "run %s's history is purged but for the record of its deletion", runID)
	st, err := b.js.Stream(b.ctx, streams.History)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(b.ctx, streams.Layout{}.Subject(runID))
	require.NoError(t, err)
	envs, err := event.DecodeEnvelopes(m.Data)
	require.NoError(t, err)
	require.Len(t, envs, 1)
	require.Equal(t, event.TypeRunDeleted, envs[0].Type())
	return envs[0]
}

func encoded(t *testing.T, hist []event.Envelope) string {
	t.Helper()
	b, err := event.MarshalEnvelopes(hist)
	require.NoError(t, err)
	return string(b)
}

// TestRetentionSweep: with a virtual clock, the sweep deletes exactly the ended runs past their
// period (a definition's WithRetention, else the default), archives them readably, leaves
// tombstones, and never touches a run that has not ended, however old.
func TestRetentionSweep(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	h := b.sweeper(t, archive.ObjectStore, nil)
	// The running runs start first: the messages purged later come after theirs in the stream.
	b.start(t, h, "await", nil, "await-1")
	b.start(t, h, "await", nil, "await-2")
	hist := map[string][]event.Envelope{}
	for _, id := range []string{"short-1", "short-2"} {
		hist[id] = b.start(t, h, "short", nil, id)
	}
	hist["steps-1"] = b.start(t, h, "steps", 2, "steps-1")
	b.start(t, h, "await", nil, "await-3") // the purged messages lie between the running runs

	// Nothing is due yet.
	rep, err := h.Sweep(b.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Deleted)

	// Two hours later: the "short" runs (kept an hour) are due; "steps" (a day) is not.
	b.clock.advance(2 * time.Hour)
	rep, err = h.Sweep(b.ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"short-1", "short-2"}, rep.Deleted)
	b.requireDeleted(t, "short-1", hist["short-1"])
	b.requireDeleted(t, "short-2", hist["short-2"])
	require.NotZero(t, b.stored(t, "steps-1"), "an ended run within its period is kept")

	// Tombstones are hidden from listings unless asked for.
	require.Eventually(t, func() bool { _, ok := b.listed(t, false)["short-1"]; return !ok }, 10*time.Second, 5*time.Millisecond)
	all := b.listed(t, true)
	require.NotNil(t, all["short-1"])
	require.NotNil(t, all["short-2"])
	require.Nil(t, all["steps-1"])
	require.Contains(t, b.listed(t, false), "steps-1")
	// The UI's run page reads the archive too, and says so.
	resp, err := http.Get("http://" + h.HTTPAddr() + "/ui/runs/short-1")
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", page)
	require.Contains(t, string(page), "this history is read from its archive objectstore:FLOW_ARCHIVE/short-1")
	require.Contains(t, string(page), "run.completed")

	// Two days later: the default retention has passed for "steps" too. The "await" runs started
	// two days ago by this clock, but they have not ended: they are never touched.
	b.clock.advance(48 * time.Hour)
	rep, err = h.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"steps-1"}, rep.Deleted)
	b.requireDeleted(t, "steps-1", hist["steps-1"])
	for _, id := range []string{"await-1", "await-2", "await-3"} {
		require.NotZero(t, b.stored(t, id))
		require.Nil(t, b.entry(t, id).Deleted)
	}
	// A sweep again deletes nothing more.
	rep, err = h.Sweep(b.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Deleted)

	// A restarted history service checks the stream at start: the gaps the sweeps left are
	// accounted for by the tombstones, so nothing is taken for lost or quarantined.
	b.sweeper(t, archive.ObjectStore, nil)
	for _, id := range []string{"short-1", "short-2", "steps-1", "await-1", "await-2", "await-3"} {
		require.Empty(t, b.entry(t, id).Damaged, "run %s", id)
	}
	damaged, err := b.js.KeyValue(b.ctx, streams.DamagedBucket)
	require.NoError(t, err)
	_, err = damaged.Get(b.ctx, "await-2")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the running run is not quarantined")

	// A late input for a deleted run is refused and re-creates no partial stream.
	_, err = b.client.Signal(b.ctx, "short-1", "go", "late", nil)
	require.ErrorIs(t, err, flow.ErrRunDeleted)
	require.Contains(t, err.Error(), "deleted")
	b.requireRecordOnly(t, "short-1")
	// The untouched runs still work: a signal ends await-1.
	_, err = b.client.Signal(b.ctx, "await-1", "go", "now", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(b.ctx, "await-1", &out))
	require.Equal(t, "now", out)
}

// TestRetentionArchives: a directory archive is read back as the object store's is; with the
// archive off, the history is deleted and a read answers ErrRunDeleted, saying when and why.
func TestRetentionArchives(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	dir := t.TempDir()

	h := b.sweeper(t, archive.DirPrefix+dir, nil)
	want := b.start(t, h, "short", nil, "to-dir")
	b.clock.advance(2 * time.Hour)
	rep, err := h.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"to-dir"}, rep.Deleted)
	b.requireDeleted(t, "to-dir", want)
	_, err = os.Stat(filepath.Join(dir, "to-dir.json"))
	require.NoError(t, err)
	require.NoError(t, h.Stop())

	b.clock.advance(0)
	h = b.sweeper(t, archive.Off, nil)
	b.start(t, h, "short", nil, "unarchived")
	b.clock.advance(2 * time.Hour)
	rep, err = h.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"unarchived"}, rep.Deleted)
	require.Eventually(t, func() bool { sum := b.entry(t, "unarchived"); return sum.Deleted != nil && sum.Deleted.Purged },
		20*time.Second, 5*time.Millisecond)
	b.requireRecordOnly(t, "unarchived")
	sum := b.entry(t, "unarchived")
	require.NotNil(t, sum.Deleted)
	require.Empty(t, sum.Deleted.Archive)
	require.Eventually(t, func() bool {
		_, err = b.client.History(b.ctx, "unarchived", 0)
		return errors.Is(err, flow.ErrRunDeleted)
	}, 10*time.Second, 5*time.Millisecond, "%v", err)
	require.Contains(t, err.Error(), "deleted at")
	require.Contains(t, err.Error(), "retention 1h0m0s passed")
	d, err := b.client.Deletion(b.ctx, "unarchived")
	require.ErrorIs(t, err, flow.ErrRunDeleted)
	require.NotNil(t, d)
}

// TestRetentionCrash: a sweep cut short at each point between its writes (archive, tombstone,
// purge, tombstone purged) leaves the run listed or tombstoned with a readable archive, never
// lost; a fresh sweeper (the process restarted) finishes the deletion.
func TestRetentionCrash(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	for i, p := range fault.RetentionPoints {
		runID := fmt.Sprintf("crash-%d", i)
		b.clock.advance(0)
		faults := &fault.Injector{}
		faults.Arm(p, fault.Fail, 0, 0) // every hit: the consumer's attempts to finish fail too
		h := b.sweeper(t, archive.ObjectStore, faults)
		want := b.start(t, h, "short", nil, runID)
		b.clock.advance(2 * time.Hour)
		_, err := h.Sweep(b.ctx)
		require.ErrorIs(t, err, fault.ErrInjected, "point %s", p)
		require.NoError(t, h.Stop()) // the process dies here

		sum := b.entry(t, runID)
		switch p {
		case fault.RetentionAfterArchive:
			require.Nil(t, sum.Deleted, "no tombstone yet: the run is listed as it was")
			require.Equal(t, uint64(len(want)), b.stored(t, runID), "nothing recorded")
		default:
			// Recorded: the tombstone is written; the test's other history service, which
			// consumes too, may finish the deletion meanwhile.
			require.NotNil(t, sum.Deleted)
		}
		if sum.Deleted != nil {
			// Tombstoned: its archive already reads back whole.
			got, err := archive.Read(b.ctx, b.js, sum.Deleted.Archive)
			require.NoError(t, err)
			require.Equal(t, encoded(t, want), encoded(t, got))
		}

		b.restartedSweepDeletes(t, runID, want)
	}
	// Every crashed run ends deleted, listed with --include-deleted.
	all := b.listed(t, true)
	for i := range fault.RetentionPoints {
		require.NotNil(t, all[fmt.Sprintf("crash-%d", i)])
	}
}

// TestRetentionLease: with the sweeper on, two replicas compete for the retention lease; the
// one that holds it deletes a run past its period without being asked.
func TestRetentionLease(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	b.clock.advance(2 * time.Hour) // every "short" run is past its hour as soon as it ends
	for range 2 {
		historytest.Start(t, history.Config{Conn: natstest.Connect(t, b.srv), HTTPAddr: "off", Logger: quiet,
			RetentionSweep: 50 * time.Millisecond, Clock: b.clock.Now})
	}
	_, err := b.client.Start(b.ctx, "short", nil, &flow.StartOptions{RunID: "swept"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		kv, err := b.js.KeyValue(b.ctx, streams.RunsBucket)
		require.NoError(t, err)
		e, err := kv.Get(b.ctx, "swept")
		if err != nil {
			return false
		}
		sum, err := decodeSummary(e.Value())
		return err == nil && sum.Deleted != nil && sum.Deleted.Purged
	}, 20*time.Second, 10*time.Millisecond, "the lease holder sweeps")
	b.requireRecordOnly(t, "swept")
	leases, err := b.js.KeyValue(b.ctx, streams.LeasesBucket)
	require.NoError(t, err)
	held, err := leases.Get(b.ctx, streams.RetentionLease)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(held.Value()), "history-"), "%q", held.Value())
}

// TestRetentionAbandonedChild: a parent deleted while the child it abandoned still runs; the
// child's end, which would settle it in its parent, finds no parent and goes on (the history
// service does not retry that commit forever).
func TestRetentionAbandonedChild(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	h := b.sweeper(t, archive.ObjectStore, nil)
	_, err := b.client.Start(b.ctx, "leaver", nil, &flow.StartOptions{RunID: "leaver-1"})
	require.NoError(t, err)
	child := event.ChildRunID("leaver-1", "c")
	require.Eventually(t, func() bool { sum, ok := h.IndexedEntry(child); return ok && sum.Status == core.StatusSuspended },
		20*time.Second, 5*time.Millisecond, "the child waits for its signal")
	_, err = b.client.Cancel(b.ctx, "leaver-1", "leave the child behind")
	require.NoError(t, err)
	require.Eventually(t, func() bool { sum, ok := h.IndexedEntry("leaver-1"); return ok && sum.Status == core.StatusCancelled },
		20*time.Second, 5*time.Millisecond)

	b.clock.advance(2 * time.Hour)
	rep, err := h.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"leaver-1"}, rep.Deleted, "the parent ended; its running child is kept")
	require.Nil(t, b.entry(t, child).Deleted)

	_, err = b.client.Signal(b.ctx, child, "go", "done", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, b.client.Result(b.ctx, child, &out))
	require.Equal(t, "done", out)
	require.Eventually(t, func() bool { return b.entry(t, child).Status == core.StatusCompleted }, 20*time.Second, 5*time.Millisecond,
		"the history service applied the child's end")
	b.requireRecordOnly(t, "leaver-1") // settling the child re-created no partial parent
}
