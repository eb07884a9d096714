package jsstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/store/storetest"
	"github.com/flowrun/flow/pkg/event"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	storetest.Exercise(t, func(t *testing.T) store.EventStore {
		s, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil)
		require.NoError(t, err)
		return s
	})
}

var epoch = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func started() event.Event {
	return event.Event{Time: epoch, Payload: &event.RunStarted{Spec: event.Spec{Definition: "d"}, Input: json.RawMessage(`{}`), Seed: "s"}}
}

func signal(d string) event.Event {
	return event.Event{Time: epoch, Payload: &event.SignalReceived{Name: "n", Payload: json.RawMessage(`1`), DeliveryID: d}}
}

func TestJetStreamStore(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)

	t.Run("WritesOneCloudEventPerCommit", func(t *testing.T) {
		t.Parallel()
		js := natstest.JetStream(t, srv)
		s, err := jsstore.New(t.Context(), js, nil)
		require.NoError(t, err)
		_, err = s.Append(t.Context(), "ce-run", 0, started(), signal("a"), signal("b"))
		require.NoError(t, err)
		st, err := js.Stream(t.Context(), streams.History)
		require.NoError(t, err)
		m, err := st.GetLastMsgForSubject(t.Context(), streams.Layout{}.Subject("ce-run"))
		require.NoError(t, err)
		// The CloudEvents SDK's NATS binding reads the commit as a valid event.
		ev, err := binding.ToEvent(t.Context(), cenats.NewMessage(&nats.Msg{Header: m.Header, Data: m.Data}))
		require.NoError(t, err)
		require.NoError(t, ev.Validate())
		require.Equal(t, "ce-run:1", ev.ID())
		require.Equal(t, jsstore.CommitType, ev.Type())
		require.Equal(t, "flow", ev.Source())
		require.Equal(t, "ce-run", ev.Subject())
		require.Equal(t, "application/json", ev.DataContentType())
		require.Equal(t, "2026-11-30T09:00:00Z", ev.Time().UTC().Format(time.RFC3339))
		require.Equal(t, map[string]any{"flowseq": "1", "flowcount": "3", "flowcommit": m.Header.Get(jsstore.HeaderCommit),
			"flowtypes": "run.started,signal.received,signal.received"}, ev.Extensions())
		require.Equal(t, "ce-run:1", m.Header.Get("Nats-Msg-Id"))
		var envs []event.Envelope
		require.NoError(t, json.Unmarshal(m.Data, &envs))
		require.Len(t, envs, 3)
	})

	t.Run("WritersWithSeparateStoresConflict", func(t *testing.T) {
		t.Parallel()
		a, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil)
		require.NoError(t, err)
		b, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil)
		require.NoError(t, err)
		_, err = a.Append(t.Context(), "two-writers", 0, started())
		require.NoError(t, err)
		_, err = b.Load(t.Context(), "two-writers", 0)
		require.NoError(t, err)
		_, err = a.Append(t.Context(), "two-writers", 1, signal("from-a"))
		require.NoError(t, err)
		_, err = b.Append(t.Context(), "two-writers", 1, signal("from-b"))
		var ce *store.ConflictError
		require.ErrorAs(t, err, &ce, "b's position is stale")
		require.Equal(t, uint64(2), ce.Actual)
		tail, err := b.Load(t.Context(), "two-writers", 1)
		require.NoError(t, err)
		require.Len(t, tail, 1)
		require.Equal(t, "from-a", tail[0].Payload.(*event.SignalReceived).DeliveryID)
		last, err := b.Append(t.Context(), "two-writers", 2, signal("from-b"))
		require.NoError(t, err)
		require.Equal(t, uint64(3), last)
	})

	// An append whose ack was lost, after which another writer appended on top of it, is
	// still the appender's own commit: settling it must look at the commit after the expected
	// position, not at the run's last one.
	t.Run("LostAckUnderALaterCommitIsStillOurs", func(t *testing.T) {
		t.Parallel()
		js := natstest.JetStream(t, srv)
		other, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil)
		require.NoError(t, err)
		lose := false
		s, err := jsstore.New(t.Context(), js, &jsstore.Options{AfterPublish: func(msg *nats.Msg, ack *jetstream.PubAck, err error) (*jetstream.PubAck, error) {
			if !lose || err != nil {
				return ack, err
			}
			lose = false
			// The commit landed; before its writer learns it, another writer appends after it.
			_, err = other.Append(t.Context(), "lost-ack", 2, signal("later"))
			require.NoError(t, err)
			return nil, nats.ErrTimeout
		}})
		require.NoError(t, err)
		_, err = s.Append(t.Context(), "lost-ack", 0, started())
		require.NoError(t, err)
		_, err = other.Load(t.Context(), "lost-ack", 0)
		require.NoError(t, err)
		lose = true
		last, err := s.Append(t.Context(), "lost-ack", 1, signal("mine"))
		require.NoError(t, err, "the commit is ours although the run moved on")
		require.Equal(t, uint64(2), last)
		hist, err := s.Load(t.Context(), "lost-ack", 0)
		require.NoError(t, err)
		require.Len(t, hist, 3)
		require.Equal(t, "mine", hist[1].Payload.(*event.SignalReceived).DeliveryID)
		require.Equal(t, "later", hist[2].Payload.(*event.SignalReceived).DeliveryID)
	})

	t.Run("LoadsLongInterleavedHistoriesInBatches", func(t *testing.T) {
		t.Parallel()
		s, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil)
		require.NoError(t, err)
		_, err = s.Append(t.Context(), "long", 0, started())
		require.NoError(t, err)
		for i := range 600 {
			_, err := s.Append(t.Context(), "long", uint64(i+1), signal(fmt.Sprintf("d-%d", i)))
			require.NoError(t, err)
			_, err = s.Append(t.Context(), fmt.Sprintf("noise-%d", i), 0, started())
			require.NoError(t, err)
		}
		fresh, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil)
		require.NoError(t, err)
		all, err := fresh.Load(t.Context(), "long", 0)
		require.NoError(t, err)
		require.Len(t, all, 601)
		for i, e := range all {
			require.Equal(t, uint64(i+1), e.Seq)
		}
		tail, err := fresh.Load(t.Context(), "long", 595)
		require.NoError(t, err)
		require.Len(t, tail, 6)
		require.Equal(t, uint64(596), tail[0].Seq)
	})
}

// A read that runs out of time fails: it never passes part of a history off as all of it. The
// batch reader ends a batch silently at its context's deadline (and a read without one at the
// connection's timeout, 2 s by default): under load a Load in TestJetStreamStore returned 249 of
// a run's 601 events with no error.
func TestLoadOutOfTimeFails(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	s, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil)
	require.NoError(t, err)
	_, err = s.Append(t.Context(), "late", 0, started())
	require.NoError(t, err)
	fresh, err := jsstore.New(t.Context(), natstest.JetStream(t, srv), nil) // knows nothing of the run
	require.NoError(t, err)
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	got, err := fresh.Load(ctx, "late", 0)
	require.ErrorIs(t, err, context.DeadlineExceeded, "read %d of 1 events", len(got))
}
