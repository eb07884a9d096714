package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// large-payload and long-run: no size cliffs (docs/large-payloads.md).

const (
	// defBlob runs step "blob", whose output is a JSON string of blobInput.MiB MiB, and
	// completes with that output: large-payload.
	defBlob  = "bench-blob"
	stepBlob = "blob"
	// defTicker waits for the signal "stop" while any number of other signals pile up, then
	// completes with their count: long-run.
	defTicker = "bench-ticker"
)

type blobInput struct {
	MiB int `json:"mib"`
}

// registerLarge registers defBlob and its step.
func registerLarge(reg *flow.Registry) {
	flow.RegisterWorkflow(reg, defBlob, blobWorkflow)
	flow.RegisterStep(reg, stepBlob, func(_ context.Context, mib int) (json.RawMessage, error) { return blob(mib), nil })
	flow.RegisterWorkflow(reg, defTicker, tickerWorkflow)
}

// blob returns a JSON string of mib MiB.
func blob(mib int) json.RawMessage {
	b := make([]byte, mib<<20)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	b[0], b[len(b)-1] = '"', '"'
	return b
}

func blobWorkflow(ctx *flow.Context, in blobInput) (flow.Decision, error) {
	if out := ctx.StepOutput(stepBlob); out != nil {
		return ctx.Complete(out), nil
	}
	return ctx.ScheduleStep(stepBlob, stepBlob, in.MiB), nil
}

func tickerWorkflow(ctx *flow.Context, _ any) (flow.Decision, error) {
	if ctx.Signal("stop") != nil {
		return ctx.Complete(ctx.Snapshot().Progress.SignalsReceived), nil
	}
	return ctx.AwaitSignal("stop", "stop"), nil
}

// runLargePayload: one run whose step returns r.n MiB and which completes with it, through the
// whole stack; the output is offloaded to FLOW_PAYLOADS once (the run's output is the same
// object) and read back by the client. total_s runs from the start to the client's Result
// returning the bytes: the step makes them, the worker encodes, hashes and stores them, the
// next decision reads them back from the store and completes with them (hashed again, not
// stored again), the client reads and decodes them. write_s is the part from step.scheduled to
// step.completed (make, encode, hash, store), read_s a read of the object by a new store handle
// (no cache): the bytes and their digest check.
func runLargePayload(r *rep) (map[string]float64, error) {
	mib := r.n
	r.begin()
	t0 := time.Now()
	id, err := r.st.client.Start(r.ctx, defBlob, blobInput{MiB: mib}, nil)
	if err != nil {
		return nil, err
	}
	var out json.RawMessage
	if err := r.st.client.Result(r.ctx, id, &out); err != nil {
		return nil, err
	}
	total := time.Since(t0)
	if len(out) != mib<<20 {
		return nil, fmt.Errorf("the result has %d bytes, want %d", len(out), mib<<20)
	}
	out = nil
	hist, err := r.st.client.History(r.ctx, id, 0)
	if err != nil {
		return nil, err
	}
	var scheduled, completed time.Time
	var raw json.RawMessage
	for _, e := range hist {
		switch p := e.Payload.(type) {
		case *event.StepScheduled:
			scheduled = e.Time
		case *event.StepCompleted:
			completed, raw = e.Time, p.Output
		}
	}
	ref, ok := payload.Parse(raw)
	if !ok {
		return nil, fmt.Errorf("the step's output is not offloaded: %.80s", raw)
	}
	store, err := objstore.Open(r.ctx, r.st.js, streams.PayloadsBucket, 0)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	b, err := store.Get(r.ctx, ref)
	if err != nil {
		return nil, err
	}
	read := time.Since(t1)
	r.end()
	if len(b) != mib<<20 {
		return nil, fmt.Errorf("the payload has %d bytes, want %d", len(b), mib<<20)
	}
	m, write := float64(mib), completed.Sub(scheduled)
	return map[string]float64{
		"mib": m, "total_s": total.Seconds(), "mib_per_s": m / total.Seconds(),
		"write_s": write.Seconds(), "write_mib_per_s": m / write.Seconds(),
		"read_s": read.Seconds(), "read_mib_per_s": m / read.Seconds(),
	}, nil
}

// longRunPoints are the history lengths long-run measures at, up to its size.
var longRunPoints = []int{1_000, 10_000, 100_000, 1_000_000}

// runLongRun: one run that waits for a signal while signal.received events pile up, grown to
// r.n events; at 1k, 10k, 100k and 1M events (those up to r.n, and r.n) it measures, each in a
// fresh engine and store (a cold process): a cold load reading the whole history (cold_full_ms,
// and the messages it read), writing a checkpoint of that snapshot (checkpoint_encode_ms,
// checkpoint_save_ms, checkpoint_mib), a cold load
// from the checkpoint and the tail (cold_cp_ms, cold_cp_msgs), and, on the warm engine, one
// input and one decision (append a signal, drive: decision_ms, the median of 20, with
// checkpoints on: the engine reads them; the history service, absent here, writes them). It runs on its own embedded nats-server (in a temporary directory) with an
// engine in this process and no Flow services, so that its million events load nothing else;
// the history is appended with jsstore.BulkAppend, one event per message, as a run's inputs are.
func runLongRun(r *rep) (map[string]float64, error) {
	dir, err := os.MkdirTemp("", "flowbench-longrun-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, NoListen: true, Name: "longrun", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	ctx := r.ctx
	if err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		return nil, err
	}
	cps, err := objstore.OpenCheckpoints(ctx, js, streams.CheckpointsBucket)
	if err != nil {
		return nil, err
	}
	reg := flow.NewRegistry(&flow.RegistryOptions{Logger: slog.New(slog.DiscardHandler)})
	registerLarge(reg)
	newEngine := func(checkpoints bool) (*engine.Engine, *jsstore.Store, error) {
		be, err := backend.Open(ctx, js, backend.Role{Source: "flow/bench", Logger: slog.New(slog.DiscardHandler),
			Host: func(*jshost.Host) engine.Host { return nopHost{} }, Checkpoints: checkpoints}, engine.Config{Runtime: sdk.RuntimeOf(reg)})
		if err != nil {
			return nil, nil, err
		}
		return be.Engine, be.Store, nil
	}

	writer, wst, err := newEngine(false)
	if err != nil {
		return nil, err
	}
	spec, err := sdk.RuntimeOf(reg).Spec(defTicker, []byte("null"))
	if err != nil {
		return nil, err
	}
	runID, _, err := writer.Start(ctx, engine.StartParams{RunID: "long-run", Spec: spec})
	if err != nil {
		return nil, err
	}
	if _, err := writer.Drive(ctx, runID, 0); err != nil {
		return nil, err
	}
	seq := uint64(2) // run.started, signal.awaited
	points := slices.DeleteFunc(slices.Clone(longRunPoints), func(p int) bool { return p >= r.n })
	points = append(points, r.n)
	m := map[string]float64{"events": float64(r.n)}
	r.begin()
	began := time.Now()
	for _, p := range points {
		// Grow the history to p events, 10,000 at a time.
		for seq < uint64(p) {
			n := min(10_000, uint64(p)-seq)
			events := make([]event.Event, n)
			at := time.Now().UTC()
			for i := range events {
				d := "t" + strconv.FormatUint(seq+uint64(i)+1, 10)
				events[i] = event.Event{Time: at, Payload: &event.SignalReceived{Name: "tick", Payload: json.RawMessage(`{}`), DeliveryID: d}}
			}
			if seq, err = wst.BulkAppend(ctx, runID, seq, events, 1); err != nil {
				return nil, err
			}
		}
		label := eventsLabel(p)

		e, st, err := newEngine(false)
		if err != nil {
			return nil, err
		}
		t := time.Now()
		s, err := e.ReadSnapshot(ctx, runID)
		if err != nil {
			return nil, err
		}
		m["cold_full_ms_"+label], m["cold_full_msgs_"+label] = ms(time.Since(t)), float64(st.MessagesRead())
		if s.Seq != seq {
			return nil, fmt.Errorf("a cold load read %d events of %d", s.Seq, seq)
		}

		// The checkpoint the history service writes of s at its interval (engine.NewCheckpoint,
		// at the position of the commit that ends with s.Seq): encode it, store it.
		_, pos, ok := st.Position(runID)
		if !ok {
			return nil, errors.New("the store does not know where the run's last commit sits")
		}
		t = time.Now()
		b, err := s.MarshalCheckpoint()
		if err != nil {
			return nil, err
		}
		m["checkpoint_encode_ms_"+label], m["checkpoint_mib_"+label] = ms(time.Since(t)), float64(len(b))/(1<<20)
		t = time.Now()
		if err := cps.Save(ctx, engine.Checkpoint{RunID: runID, Seq: s.Seq, Time: s.UpdatedAt, Position: pos, Snapshot: b}); err != nil {
			return nil, err
		}
		m["checkpoint_save_ms_"+label] = ms(time.Since(t))
		s, b = nil, nil

		e, st, err = newEngine(true)
		if err != nil {
			return nil, err
		}
		t = time.Now()
		res, err := e.Drive(ctx, runID, seq)
		if err != nil {
			return nil, err
		}
		m["cold_cp_ms_"+label], m["cold_cp_msgs_"+label] = ms(time.Since(t)), float64(st.MessagesRead())
		if res.Seq != seq || res.Status != core.StatusSuspended {
			return nil, fmt.Errorf("the run is %s at %d after a cold load from its checkpoint, want suspended at %d", res.Status, res.Seq, seq)
		}

		var took []time.Duration
		for i := range 20 {
			t := time.Now()
			if _, err := e.Signal(ctx, runID, "tick", []byte(`{}`), fmt.Sprintf("d-%s-%d", label, i)); err != nil {
				return nil, err
			}
			if _, err := e.Drive(ctx, runID, 0); err != nil {
				return nil, err
			}
			took = append(took, time.Since(t))
			seq++
		}
		slices.Sort(took)
		m["decision_ms_"+label], m["decision_max_ms_"+label] = ms(took[len(took)/2]), ms(took[len(took)-1])
		r.st.logger.Info("long-run", "events", p, "cold_full_ms", m["cold_full_ms_"+label], "cold_cp_ms", m["cold_cp_ms_"+label],
			"decision_ms", m["decision_ms_"+label], "elapsed", time.Since(began).Round(time.Second))
	}
	r.end()
	return m, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// eventsLabel names a history length: 1k, 10k, 100k, 1M, or the number.
func eventsLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1_000 && n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "k"
	}
	return strconv.Itoa(n)
}

// nopHost is the long-run engine's host: its one run needs no timers, hooks or tasks.
type nopHost struct{}

func (nopHost) ScheduleTimers(context.Context, []core.Timer) error { return nil }
func (nopHost) DeleteTimers(context.Context, []core.Timer) error   { return nil }
func (nopHost) RegisterHook(context.Context, string, string, string) error {
	return nil
}
func (nopHost) LookupHook(context.Context, string) (string, string, error) {
	return "", "", core.ErrNotFound
}
func (nopHost) ReleaseHook(context.Context, string, string, string) error { return nil }
func (nopHost) Resume(context.Context, engine.Task) error                 { return nil }
