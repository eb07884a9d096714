package jsstore_test

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/inputsig"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
)

// Input signatures: a store with the key signs the commits that hold input events; one without
// (a worker's) cannot, and what it appends of them does not read back from a store with the key,
// nor does a signed commit copied into another run. Commits before the key's epoch need none.
func TestInputSignatures(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	js := natstest.JetStream(t, srv)
	ctx := t.Context()
	require.NoError(t, streams.Ensure(ctx, js, streams.Config{}))
	// Written before inputs were signed: the key's epoch is after it.
	unsigned, err := jsstore.New(ctx, js, &jsstore.Options{Unsigned: true})
	require.NoError(t, err)
	require.False(t, unsigned.SignsInputs())
	_, err = unsigned.Append(ctx, "old", 0, started(), signal("a"))
	require.NoError(t, err)

	signed, err := jsstore.New(ctx, js, nil)
	require.NoError(t, err)
	require.True(t, signed.SignsInputs())
	hist := natstest.JetStream(t, srv)
	last := func(runID string) *jetstream.RawStreamMsg {
		st, err := hist.Stream(ctx, streams.History)
		require.NoError(t, err)
		m, err := st.GetLastMsgForSubject(ctx, streams.Layout{}.Subject(runID))
		require.NoError(t, err)
		return m
	}

	t.Run("SignedInputsReadBack", func(t *testing.T) {
		_, err := signed.Append(ctx, "ok", 0, started())
		require.NoError(t, err)
		require.Empty(t, last("ok").Header.Get(jsstore.HeaderInputSignature), "a commit without inputs carries no signature")
		_, err = signed.Append(ctx, "ok", 1, signal("a"), signal("b"))
		require.NoError(t, err)
		require.NotEmpty(t, last("ok").Header.Get(jsstore.HeaderInputSignature))
		envs, err := signed.Load(ctx, "ok", 0)
		require.NoError(t, err)
		require.Len(t, envs, 3)
	})

	t.Run("BeforeTheEpochNoSignatureIsNeeded", func(t *testing.T) {
		envs, err := signed.Load(ctx, "old", 0)
		require.NoError(t, err)
		require.Len(t, envs, 2)
	})

	t.Run("AnUnsignedInputIsDamage", func(t *testing.T) {
		_, err := signed.Append(ctx, "forged", 0, started())
		require.NoError(t, err)
		_, err = unsigned.Append(ctx, "forged", 1, signal("forged"))
		require.NoError(t, err)
		_, err = signed.Load(ctx, "forged", 0)
		require.ErrorIs(t, err, store.ErrDamaged)
		require.ErrorIs(t, err, inputsig.ErrUnsigned)
		require.Contains(t, err.Error(), `signal.received at seq 2 of run "forged" is not written by an input writer`)
		// Unsigned stores do not check: the history service, which does, quarantines the run.
		_, err = unsigned.Load(ctx, "forged", 0)
		require.NoError(t, err)
		sv, err := signed.Salvage(ctx, "forged")
		require.NoError(t, err)
		require.ErrorIs(t, sv.Damage, inputsig.ErrUnsigned)
		require.Len(t, sv.Commits, 1, "the valid prefix ends before the forged commit")
	})

	t.Run("ASignedCommitCopiedIntoAnotherRunIsDamage", func(t *testing.T) {
		for _, id := range []string{"source", "target"} {
			_, err := signed.Append(ctx, id, 0, started())
			require.NoError(t, err)
		}
		_, err := signed.Append(ctx, "source", 1, signal("a"))
		require.NoError(t, err)
		m := last("source")
		// The same event, signature and headers, at the same position of another run.
		copied := &nats.Msg{Subject: streams.Layout{}.Subject("target"), Header: nats.Header{},
			Data: bytes.ReplaceAll(m.Data, []byte(`"run_id":"source"`), []byte(`"run_id":"target"`))}
		for k, v := range m.Header {
			copied.Header[k] = v
		}
		copied.Header.Del(jetstream.MsgIDHeader)
		copied.Header.Del(jetstream.ExpectedLastSubjSeqHeader)
		_, err = hist.PublishMsg(ctx, copied)
		require.NoError(t, err)
		envs, err := unsigned.Load(ctx, "target", 0)
		require.NoError(t, err, "the copy is a well-formed commit of the target")
		require.Len(t, envs, 2)
		_, err = signed.Load(ctx, "target", 0)
		require.ErrorIs(t, err, inputsig.ErrUnsigned)
		require.Contains(t, err.Error(), "does not match")
	})

	t.Run("ARetriedPublishCarriesTheSignature", func(t *testing.T) {
		var lost atomic.Bool
		retrying, err := jsstore.New(ctx, js, &jsstore.Options{AfterPublish: func(msg *nats.Msg, ack *jetstream.PubAck, err error) (*jetstream.PubAck, error) {
			if err == nil && msg.Header.Get(jsstore.HeaderInputSignature) != "" && lost.CompareAndSwap(false, true) {
				return nil, nats.ErrTimeout // the ack is lost: the store settles, and publishes again if needed
			}
			return ack, err
		}})
		require.NoError(t, err)
		_, err = retrying.Append(ctx, "retried", 0, started(), signal("a"))
		require.NoError(t, err)
		require.True(t, lost.Load())
		envs, err := signed.Load(ctx, "retried", 0)
		require.NoError(t, err)
		require.Len(t, envs, 2)
	})
}
