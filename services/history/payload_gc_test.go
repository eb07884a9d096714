package history_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/historytest"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
	"github.com/flowrun/flow/services/worker"
)

// gcThreshold is the offload threshold of the payload collector's tests: their inputs and
// outputs of a few KiB are offloaded.
const gcThreshold = 1024

// doc is a run input of the payload collector's tests.
type doc struct {
	Doc string `json:"doc"`
}

func bigDoc(c byte) doc { return doc{Doc: strings.Repeat(string(c), 3000)} }

// gcRegistry: "echo" (kept an hour after its end) completes with its input wrapped; "once"
// (kept an hour) completes with its input's length, a small output; "hold" (the default
// retention) waits for signal "go" and then completes with its input's length.
func gcRegistry() *flow.Registry {
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: quiet})
	flow.RegisterWorkflow(reg, "echo", func(ctx *flow.Context, in doc) (flow.Decision, error) {
		return ctx.Complete(map[string]doc{"echo": in}), nil
	}, flow.WithRetention(time.Hour))
	flow.RegisterWorkflow(reg, "once", func(ctx *flow.Context, in doc) (flow.Decision, error) {
		return ctx.Complete(len(in.Doc)), nil
	}, flow.WithRetention(time.Hour))
	flow.RegisterWorkflow(reg, "hold", func(ctx *flow.Context, in doc) (flow.Decision, error) {
		if ctx.Signal("go") != nil {
			return ctx.Complete(len(in.Doc)), nil
		}
		return ctx.AwaitSignal("go", "go"), nil
	})
	return reg
}

type gcBundle struct {
	*retentionBundle
	// store is a handle on FLOW_PAYLOADS of its own (no cache shared with the services).
	store *objstore.Store
}

// setupPayloadGC starts a server, a history service that consumes (its sweeper, reconciler and
// collector disabled), an ingress and a worker of gcRegistry that offload payloads over
// gcThreshold bytes.
func setupPayloadGC(t *testing.T) *gcBundle {
	t.Helper()
	srv := natstest.RunJetStream(t)
	b := &retentionBundle{srv: srv, js: natstest.JetStream(t, srv), clock: &virtualClock{}}
	startService(t, srv, history.Config{RetentionSweep: -1, ReconcileInterval: -1, PayloadGCInterval: -1})
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet, PayloadThreshold: gcThreshold})
	w, err := worker.New(worker.Config{Conn: natstest.Connect(t, srv), Logger: quiet, PayloadThreshold: gcThreshold}, gcRegistry())
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	b.client = newClient(t, srv)
	var cancel context.CancelFunc
	b.ctx, cancel = context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	store, err := objstore.Open(b.ctx, b.js, streams.PayloadsBucket, gcThreshold)
	require.NoError(t, err)
	store.SetCacheBytes(0)
	return &gcBundle{retentionBundle: b, store: store}
}

// collector starts a history service that sweeps and collects only when the test says, by the
// bundle's clock, with the default grace period (an hour).
func (b *gcBundle) collector(t *testing.T, faults *fault.Injector) *history.Service {
	t.Helper()
	return historytest.Start(t, history.Config{Conn: natstest.Connect(t, b.srv), HTTPAddr: "off", Logger: quiet, RetentionSweep: -1,
		PayloadGCInterval: -1, Clock: b.clock.Now, Faults: faults})
}

// run starts a run and waits until h's copy of the index shows it in status want; it returns
// the run's history.
func (b *gcBundle) run(t *testing.T, h *history.Service, definition string, input any, runID string, want core.Status) []event.Envelope {
	t.Helper()
	_, err := b.client.Start(b.ctx, definition, input, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	require.Eventually(t, func() bool { sum, ok := h.IndexedEntry(runID); return ok && sum.Status == want },
		30*time.Second, 5*time.Millisecond, "run %s reaches %s in the collector's index", runID, want)
	hist, err := b.client.Secrets().History(b.ctx, runID, 0)
	require.NoError(t, err)
	return hist
}

// sweep has h sweep until a sweep ends without an error. A sweep that records a run's deletion
// races the consuming history service, which finishes the deletion when it applies the record,
// for the tombstone's compare-and-set, and stops short when it loses ("retry"); the next
// finishes.
func (b *gcBundle) sweep(t *testing.T, h *history.Service) {
	t.Helper()
	var err error
	require.Eventually(t, func() bool { _, err = h.Sweep(b.ctx); return err == nil },
		30*time.Second, 10*time.Millisecond, "a sweep ends: %v", err)
}

// has reports whether FLOW_PAYLOADS holds the payload r refers to.
func (b *gcBundle) has(t *testing.T, r payload.Ref) bool {
	t.Helper()
	ok, err := b.store.Has(b.ctx, r)
	require.NoError(t, err)
	return ok
}

// refsOf returns the references of hist's events, in order.
func refsOf(hist []event.Envelope) []payload.Ref { return payload.HistoryRefs(hist) }

// TestPayloadGC: the collector deletes the objects no retained history refers to once they are
// older than the grace period: the payloads of a run deleted after its retention (which its
// archive holds, so that it still reads back whole) and an orphan no event ever referred to. It
// keeps those a retained run refers to, and anything younger than the grace period. A run that
// offloads the same bytes again afterwards stores them anew.
func TestPayloadGC(t *testing.T) {
	t.Parallel()
	b := setupPayloadGC(t)
	h := b.collector(t, nil)
	echoed := b.run(t, h, "echo", bigDoc('e'), "echo-1", core.StatusCompleted)
	gone := refsOf(echoed)
	require.Len(t, gone, 2, "echo-1's input and output are offloaded")
	held := refsOf(b.run(t, h, "hold", bigDoc('h'), "hold-1", core.StatusSuspended))
	require.Len(t, held, 1)
	orphan, err := b.store.Put(b.ctx, []byte(`"an object no event refers to: a writer died before its append"`))
	require.NoError(t, err)

	// Nothing is older than the grace period yet; half an hour on, still nothing.
	for _, ahead := range []time.Duration{0, 30 * time.Minute} {
		b.clock.advance(ahead)
		rep, err := h.CollectPayloads(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 4, rep.Objects)
		require.Zero(t, rep.Candidates, "at +%s", ahead)
		require.Empty(t, rep.Deleted)
	}

	// Two hours on: echo-1 is past its retention, and deleted with its payloads archived.
	b.clock.advance(2 * time.Hour)
	b.sweep(t, h)
	b.requireDeleted(t, "echo-1", echoed)

	before := metrics.Repairs(metrics.StatePayloads)
	rep, err := h.CollectPayloads(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 4, rep.Candidates)
	require.Equal(t, 1, rep.Referenced, "hold-1's input: the run is retained")
	require.ElementsMatch(t, []string{gone[0].SHA256, gone[1].SHA256, orphan.SHA256}, rep.Deleted)
	require.Zero(t, rep.Skipped)
	require.GreaterOrEqual(t, metrics.Repairs(metrics.StatePayloads)-before, int64(3), "each deletion is counted as a repair")
	for _, r := range append(gone, orphan) {
		require.False(t, b.has(t, r), "%s is collected", r)
	}
	require.True(t, b.has(t, held[0]), "a retained run's payload is kept")

	// The deleted run reads back whole: its history as stored, and every payload it refers to
	// from its archive.
	got, err := b.client.Secrets().History(b.ctx, "echo-1", 0)
	require.NoError(t, err)
	require.Equal(t, encoded(t, echoed), encoded(t, got[:len(got)-1]), "the archived history, then run.deleted")
	all, err := archive.ReadAll(b.ctx, b.js, b.entry(t, "echo-1").Deleted.Archive)
	require.NoError(t, err)
	require.True(t, all.SelfContained)
	for _, r := range gone {
		require.Contains(t, all.Payloads, r.SHA256)
		require.True(t, r.Matches(all.Payloads[r.SHA256]))
	}
	var out map[string]doc
	require.NoError(t, json.Unmarshal(all.Payloads[gone[1].SHA256], &out))
	require.Equal(t, bigDoc('e'), out["echo"])

	// A second pass finds nothing more to delete.
	rep, err = h.CollectPayloads(b.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Deleted)
	require.Equal(t, 1, rep.Referenced)

	// The same bytes offloaded again are stored again, and read back.
	echoed2 := b.run(t, h, "echo", bigDoc('e'), "echo-2", core.StatusCompleted)
	require.Equal(t, gone, refsOf(echoed2))
	var res map[string]doc
	require.NoError(t, b.client.Result(b.ctx, "echo-2", &res))
	require.Equal(t, bigDoc('e'), res["echo"])
	for _, r := range gone {
		require.True(t, b.has(t, r))
	}
}

// TestPayloadGCRacingReoffload: the collector decided to delete an object no retained history
// refers to (older than the grace period, its run deleted), and right then a start offloads the
// same bytes again (fault.PayloadGCBeforeDelete): the start's touch of the object makes the
// deletion, conditional on the metadata the collector read, fail. The object stays, the new
// run reads its input, and the next pass keeps it for that run.
func TestPayloadGCRacingReoffload(t *testing.T) {
	t.Parallel()
	b := setupPayloadGC(t)
	faults := &fault.Injector{}
	h := b.collector(t, faults)
	hist := b.run(t, h, "once", bigDoc('r'), "once-1", core.StatusCompleted)
	refs := refsOf(hist)
	require.Len(t, refs, 1, "the input alone is offloaded")
	b.clock.advance(2 * time.Hour)
	b.sweep(t, h)
	b.requireDeleted(t, "once-1", hist)

	faults.ArmFunc(fault.PayloadGCBeforeDelete, 1, func() {
		// A writer offloads the same bytes: the ingress touches the object, then appends.
		b.run(t, h, "hold", bigDoc('r'), "hold-1", core.StatusSuspended)
	})
	rep, err := h.CollectPayloads(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, faults.Hits(fault.PayloadGCBeforeDelete), "the collector decided to delete it")
	require.Empty(t, rep.Deleted, "the deletion raced the touch and lost")
	require.Equal(t, 1, rep.Skipped)
	require.True(t, b.has(t, refs[0]))

	_, err = b.client.Signal(b.ctx, "hold-1", "go", true, nil)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.client.Result(b.ctx, "hold-1", &n), "the run reads its input")
	require.Equal(t, 3000, n)

	b.clock.advance(4 * time.Hour) // hold-1 is retained (the default retention is 30 days)
	rep, err = h.CollectPayloads(b.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Deleted)
	require.Equal(t, 1, rep.Referenced)
}

// TestPayloadReoffloadRacingGCDelete: a writer found the object it offloads there already, and
// before it touches it (fault.PayloadBeforeTouch) the collector deletes it. The writer's touch,
// conditional on the metadata it read, fails; it reads the object again, finds it deleted, and
// stores it anew: when its Put returns, the object is there.
func TestPayloadReoffloadRacingGCDelete(t *testing.T) {
	t.Parallel()
	b := setupPayloadGC(t)
	h := b.collector(t, nil)
	hist := b.run(t, h, "once", bigDoc('w'), "once-1", core.StatusCompleted)
	refs := refsOf(hist)
	require.Len(t, refs, 1)
	b.clock.advance(2 * time.Hour)
	b.sweep(t, h)
	b.requireDeleted(t, "once-1", hist)
	raw := payload.RefOf(mustJSON(t, bigDoc('w')))
	require.Equal(t, refs[0], raw)

	writer, err := objstore.Open(b.ctx, b.js, streams.PayloadsBucket, gcThreshold)
	require.NoError(t, err)
	faults := &fault.Injector{}
	writer.SetFaults(faults)
	var rep history.PayloadGCReport
	faults.ArmFunc(fault.PayloadBeforeTouch, 1, func() {
		var err error
		rep, err = h.CollectPayloads(b.ctx)
		require.NoError(t, err)
	})
	got, err := writer.Put(b.ctx, mustJSON(t, bigDoc('w')))
	require.NoError(t, err)
	require.Equal(t, raw, got)
	require.Equal(t, []string{raw.SHA256}, rep.Deleted, "the collector deleted it between the writer's read and its touch")
	b.requireReadable(t, raw)

	// A run appended now refers to it, and reads it.
	b.clock.advance(0)
	b.run(t, h, "once", bigDoc('w'), "once-2", core.StatusCompleted)
	var n int
	require.NoError(t, b.client.Result(b.ctx, "once-2", &n))
	require.Equal(t, 3000, n)
}

// TestPayloadGCUpgradesArchives: the archive of a run deleted before archives held payloads (a
// bare array of envelopes whose references point into FLOW_PAYLOADS) is rewritten with its
// payloads before the collector deletes them, in place; the run reads back whole.
func TestPayloadGCUpgradesArchives(t *testing.T) {
	t.Parallel()
	b := setupPayloadGC(t)
	h := b.collector(t, nil)
	hist := b.run(t, h, "echo", bigDoc('u'), "echo-1", core.StatusCompleted)
	refs := refsOf(hist)
	b.clock.advance(2 * time.Hour)
	b.sweep(t, h)
	b.requireDeleted(t, "echo-1", hist)
	where := b.entry(t, "echo-1").Deleted.Archive

	// As an earlier version wrote it.
	obs, err := b.js.ObjectStore(b.ctx, archive.Bucket)
	require.NoError(t, err)
	_, err = obs.PutBytes(b.ctx, "echo-1", []byte(encoded(t, hist)))
	require.NoError(t, err)
	ok, err := archive.SelfContained(b.ctx, b.js, where)
	require.NoError(t, err)
	require.False(t, ok)

	h2 := b.collector(t, nil) // a fresh process: it knows no archive yet
	rep, err := h2.CollectPayloads(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Upgraded)
	require.ElementsMatch(t, []string{refs[0].SHA256, refs[1].SHA256}, rep.Deleted)
	all, err := archive.ReadAll(b.ctx, b.js, where)
	require.NoError(t, err)
	require.True(t, all.SelfContained)
	require.Equal(t, encoded(t, hist), encoded(t, all.History))
	for _, r := range refs {
		require.True(t, r.Matches(all.Payloads[r.SHA256]), "%s is in the archive", r)
	}
	rep, err = h2.CollectPayloads(b.ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Upgraded, "an archive is looked at once")
}

// TestPayloadGCConfig: the grace period has a floor; the collector can be turned off.
func TestPayloadGCConfig(t *testing.T) {
	t.Parallel()
	_, err := history.New(history.Config{PayloadGCGrace: time.Second})
	require.ErrorContains(t, err, "PayloadGCGrace must be at least 1m0s")
	_, err = history.New(history.Config{PayloadGCInterval: -1, PayloadGCGrace: 2 * time.Hour})
	require.NoError(t, err)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// requireReadable checks that a fresh handle on FLOW_PAYLOADS reads the payload r refers to.
func (b *gcBundle) requireReadable(t *testing.T, r payload.Ref) {
	t.Helper()
	fresh, err := objstore.Open(b.ctx, b.js, streams.PayloadsBucket, gcThreshold)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	data, err := fresh.Get(ctx, r)
	require.NoError(t, err, "%s reads back", r)
	require.True(t, r.Matches(data))
}
