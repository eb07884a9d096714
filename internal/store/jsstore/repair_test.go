package jsstore_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsserver"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// forged is a message with commit headers on run runID's subject holding seq seq, written by
// someone other than a store.
func forged(t *testing.T, runID string, seq uint64) *nats.Msg {
	t.Helper()
	body, err := event.MarshalEnvelopes([]event.Envelope{{RunID: runID, Seq: seq, Time: epoch,
		Payload: &event.SignalReceived{Name: "n", Payload: json.RawMessage(`1`), DeliveryID: "forged"}}})
	require.NoError(t, err)
	h := nats.Header{}
	h.Set(jsstore.HeaderFirstSeq, strconv.FormatUint(seq, 10))
	h.Set(jsstore.HeaderCount, "1")
	h.Set(jsstore.HeaderTypes, string(event.TypeSignalReceived))
	return &nats.Msg{Subject: streams.Layout{}.Subject(runID), Header: h, Data: body}
}

func accepted(after, through uint64) event.Event {
	return event.Event{Time: epoch, Payload: &event.RunDamageAccepted{Reason: "a foreign write", After: after, Through: through}}
}

// A message on a run's subject that is not a commit following the one before it (no commit
// headers, a sequence that repeats or skips) makes the history unreadable; a repair voids it
// and what follows it, and every reader then reads the valid prefix and the repair, whatever
// position it remembered.
func TestForeignMessagesAndRepairs(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	js := natstest.JetStream(t, srv)
	for _, c := range []struct {
		name string
		msg  func(runID string) *nats.Msg
	}{
		{"NoCommitHeaders", func(runID string) *nats.Msg {
			return &nats.Msg{Subject: streams.Layout{}.Subject(runID), Data: []byte(`hello`)}
		}},
		{"RepeatedSequence", func(runID string) *nats.Msg { return forged(t, runID, 2) }},
		{"SkippedSequence", func(runID string) *nats.Msg { return forged(t, runID, 7) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			runID := "foreign-" + c.name
			writer, err := jsstore.New(ctx, natstest.JetStream(t, srv), nil)
			require.NoError(t, err)
			_, err = writer.Append(ctx, runID, 0, started())
			require.NoError(t, err)
			_, err = writer.Append(ctx, runID, 1, signal("a"))
			require.NoError(t, err)
			_, prefix, ok := writer.Position(runID)
			require.True(t, ok)
			ack, err := js.PublishMsg(ctx, c.msg(runID))
			require.NoError(t, err)

			// Every reader refuses the history: a fresh one, and one that holds the prefix.
			fresh, err := jsstore.New(ctx, natstest.JetStream(t, srv), nil)
			require.NoError(t, err)
			_, err = fresh.Load(ctx, runID, 0)
			require.ErrorIs(t, err, event.ErrMalformed)
			require.ErrorIs(t, err, store.ErrDamaged)
			_, err = writer.LoadAtLeast(ctx, runID, 2, 0)
			require.ErrorIs(t, err, store.ErrDamaged)
			// A writer that tries to append after the prefix is told the run moved or is damaged.
			_, err = writer.Append(ctx, runID, 2, signal("b"))
			require.Error(t, err)

			sv, err := fresh.Salvage(ctx, runID)
			require.NoError(t, err)
			require.ErrorIs(t, sv.Damage, event.ErrMalformed)
			require.Len(t, sv.Commits, 2)
			require.Equal(t, prefix, sv.Commits[1].Pos)
			require.Equal(t, ack.Sequence, sv.Last)

			// A repair that does not name the run's last message is refused.
			_, err = fresh.AppendRepair(ctx, runID, 2, prefix, accepted(prefix, prefix))
			require.ErrorIs(t, err, store.ErrConflict)
			last, err := fresh.AppendRepair(ctx, runID, 2, sv.Last, accepted(prefix, sv.Last), signal("b"))
			require.NoError(t, err)
			require.Equal(t, uint64(4), last)

			for name, r := range map[string]*jsstore.Store{"fresh": fresh, "writer": writer, "new": newStore(ctx, t, srv)} {
				hist, err := r.Load(ctx, runID, 0)
				require.NoError(t, err, name)
				require.Len(t, hist, 4, name)
				require.Equal(t, event.TypeRunDamageAccepted, hist[2].Type(), name)
				tail, err := r.LoadAtLeast(ctx, runID, 2, 4)
				require.NoError(t, err, name)
				require.Len(t, tail, 2, name)
			}
			// A read that starts after a voided message (a checkpoint's tail) reads again from the start.
			tail, err := newStore(ctx, t, srv).LoadAfter(ctx, runID, 2, ack.Sequence, 0)
			require.NoError(t, err)
			require.Len(t, tail, 2)

			// Writers go on after the repair; a new foreign message damages the run again.
			_, err = writer.Append(ctx, runID, 4, signal("c"))
			require.NoError(t, err)
			_, err = js.PublishMsg(ctx, c.msg(runID))
			require.NoError(t, err)
			_, err = newStore(ctx, t, srv).Load(ctx, runID, 0)
			require.ErrorIs(t, err, store.ErrDamaged)
			sv, err = fresh.Salvage(ctx, runID)
			require.NoError(t, err)
			require.Len(t, sv.Commits, 4, "the first repair stands")
		})
	}
}

func newStore(ctx context.Context, t *testing.T, srv *natsserver.Server) *jsstore.Store {
	t.Helper()
	s, err := jsstore.New(ctx, natstest.JetStream(t, srv), nil)
	require.NoError(t, err)
	return s
}
