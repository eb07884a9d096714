package natsperm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/cli"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/inputsig"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// Forged inputs: the worker role may publish to every run's history subject (it drives
// runs), so it could append a signal or a hook delivery nobody sent. Input events are signed by
// the input writers, whose key the worker role cannot read: a worker's forged signal.received or
// hook.received quarantines the run at the forgery (its history does not go on, and no input is
// taken any more), `flow verify` reports the history invalid, and so does a genuine signed
// commit a worker copies into another run. A worker's cancellation of a child whose parent ended
// names the parent and needs no signature; genuine inputs from the ingress pass.
func TestWorkersCannotForgeInputs(t *testing.T) {
	st := runRoles(t)
	srv := st.srv
	c := st.client
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	wnc, err := as(t, srv, natsperm.Worker).Dial("flow-test-forger")
	require.NoError(t, err)
	t.Cleanup(wnc.Close)
	wjs, err := jetstream.New(wnc)
	require.NoError(t, err)
	// A worker's store: it cannot read the signing key, so it signs nothing.
	forger, err := jsstore.New(ctx, wjs, &jsstore.Options{Source: "flow/forger", Unsigned: true})
	require.NoError(t, err)
	// forge appends p to the run's latest history: the run's worker may commit meanwhile (a run
	// waiting for its hook still runs the step that announces it), which is a conflict to read again
	// after, as for any writer.
	forge := func(t *testing.T, runID string, p event.Payload) uint64 {
		t.Helper()
		for {
			hist, err := forger.Load(ctx, runID, 0)
			require.NoError(t, err)
			seq := hist[len(hist)-1].Seq
			_, err = forger.Append(ctx, runID, seq, event.Event{Time: time.Now(), Payload: p})
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			require.NoError(t, err, "the worker role may publish to the run's subject")
			return seq + 1
		}
	}
	t.Setenv("FLOW_NATS_URL", srv.ClientURL())
	t.Setenv("FLOW_NATS_USER", mustRole(t, natsperm.Client).User)
	t.Setenv("FLOW_NATS_PASSWORD", password(mustRole(t, natsperm.Client)))
	verify := func(runID string) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(ctx, []string{"verify", runID}, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	// quarantined waits for the history service to refuse the run's history, as forged at seq.
	quarantined := func(t *testing.T, runID string, typ event.Type, seq uint64) {
		t.Helper()
		var err error
		require.Eventually(t, func() bool {
			_, err = c.History(ctx, runID, 0)
			return errors.Is(err, flow.ErrDamaged)
		}, 30*time.Second, 10*time.Millisecond, "the run is quarantined: %v", err)
		require.ErrorContains(t, err, string(typ)+" at seq ")
		require.ErrorContains(t, err, "not written by an input writer")
		code, out := verify(runID)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "damaged")
		require.Contains(t, out, "not written by an input writer")
		// The run does not go on: it takes no input, its result is refused, and its valid
		// prefix ends before the forgery.
		_, err = c.Signal(ctx, runID, examples.ApprovalSignal, map[string]string{"note": "genuine"}, nil)
		require.ErrorIs(t, err, flow.ErrDamaged)
		require.ErrorContains(t, c.Result(ctx, runID, nil), "not written by an input writer")
		d, err := c.Describe(ctx, runID, 0)
		require.NoError(t, err)
		require.NotNil(t, d.Damage)
		require.Less(t, d.Damage.ValidThrough, seq)
	}
	waiting := func(t *testing.T, definition string, input any, ready func(*flow.Snapshot) bool) string {
		t.Helper()
		run, err := c.Start(ctx, definition, input, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			s, err := c.Snapshot(ctx, run)
			return err == nil && ready(s)
		}, 30*time.Second, 10*time.Millisecond, "%s waits for its input", definition)
		return run
	}
	awaitsSignal := func(s *flow.Snapshot) bool { return len(s.SignalWaits) > 0 }

	t.Run("ForgedSignal", func(t *testing.T) {
		run := waiting(t, "approval", examples.ApprovalInput{Who: "bo", Timeout: "1h"}, awaitsSignal)
		seq := forge(t, run, &event.SignalReceived{Name: examples.ApprovalSignal, Payload: json.RawMessage(`{"note":"forged"}`), DeliveryID: "forged-1"})
		quarantined(t, run, event.TypeSignalReceived, seq)
		// Released, the run goes on from before the forgery: the forged signal is void, and a
		// genuine one, signed by the ingress, completes it.
		_, err := c.Resume(ctx, run, &flow.ResumeOptions{AcceptDamage: true})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, err = c.Signal(ctx, run, examples.ApprovalSignal, map[string]string{"note": "genuine"}, nil)
			return err == nil
		}, 30*time.Second, 10*time.Millisecond, "the released run takes inputs again: %v", err)
		var res examples.ApprovalResult
		require.NoError(t, c.Result(ctx, run, &res))
		require.JSONEq(t, `{"note":"genuine"}`, string(res.Payload))
		code, out := verify(run)
		require.Equal(t, 0, code, out)
	})

	t.Run("ForgedHookDelivery", func(t *testing.T) {
		run := waiting(t, "webhook", nil, func(s *flow.Snapshot) bool { return s.Hooks[examples.WebhookHook] != nil })
		seq := forge(t, run, &event.HookReceived{HookID: examples.WebhookHook, Payload: json.RawMessage(`{"paid":"forged"}`), DeliveryID: "forged-1"})
		quarantined(t, run, event.TypeHookReceived, seq)
	})

	t.Run("ForgedCancellation", func(t *testing.T) {
		run := waiting(t, "approval", examples.ApprovalInput{Timeout: "1h"}, awaitsSignal)
		seq := forge(t, run, &event.RunCancelRequested{Reason: "forged"})
		quarantined(t, run, event.TypeRunCancelRequested, seq)
	})

	t.Run("SignedSignalCopiedIntoAnotherRun", func(t *testing.T) {
		source := waiting(t, "approval", examples.ApprovalInput{Timeout: "1h"}, awaitsSignal)
		target := waiting(t, "approval", examples.ApprovalInput{Timeout: "1h"}, awaitsSignal)
		_, err := c.Signal(ctx, source, examples.ApprovalSignal, map[string]string{"note": "genuine"}, nil)
		require.NoError(t, err)
		require.NoError(t, c.Result(ctx, source, nil), "a genuine signal passes")
		code, out := verify(source)
		require.Equal(t, 0, code, out)
		// The worker reads the genuine commit and publishes it, signature and all, into the
		// other run, at the same position.
		hs, err := wjs.Stream(ctx, streams.History)
		require.NoError(t, err)
		var genuine *jetstream.RawStreamMsg
		for seq := uint64(1); genuine == nil; {
			m, err := hs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(streams.Layout{}.Subject(source)))
			require.NoError(t, err)
			if m.Header.Get(jsstore.HeaderTypes) == string(event.TypeSignalReceived) {
				genuine = m
			}
			seq = m.Sequence + 1
		}
		require.NotEmpty(t, genuine.Header.Get(inputsig.Header))
		last, err := hs.GetLastMsgForSubject(ctx, streams.Layout{}.Subject(target))
		require.NoError(t, err)
		copied := &nats.Msg{Subject: streams.Layout{}.Subject(target), Header: nats.Header{},
			Data: bytes.ReplaceAll(genuine.Data, []byte(`"run_id":"`+source+`"`), []byte(`"run_id":"`+target+`"`))}
		for k, vs := range genuine.Header {
			copied.Header[k] = vs
		}
		copied.Header.Del(jetstream.MsgIDHeader)
		copied.Header.Del(jetstream.ExpectedLastSubjSeqHeader)
		_, err = wjs.PublishMsg(ctx, copied, jetstream.WithExpectLastSequencePerSubject(last.Sequence))
		require.NoError(t, err)
		first, _ := jsstore.LastSeq(genuine.Header)
		quarantined(t, target, event.TypeSignalReceived, first)
	})

	t.Run("ParentEndCancelsItsChildren", func(t *testing.T) {
		parent := waiting(t, "parent", examples.ParentInput{Sleep: "1h"}, func(s *flow.Snapshot) bool { return len(s.Children) == 2 })
		child := parent + "=request_cancel"
		require.Eventually(t, func() bool {
			_, err := c.Snapshot(ctx, child)
			return err == nil
		}, 30*time.Second, 10*time.Millisecond, "the child runs")
		_, err := c.Cancel(ctx, parent, "the test")
		require.NoError(t, err)
		err = c.Result(ctx, child, nil)
		require.Error(t, err)
		require.NotErrorIs(t, err, flow.ErrDamaged)
		hist, err := c.History(ctx, child, 0)
		require.NoError(t, err, "a parent's cancellation of its child needs no signature")
		var req *event.RunCancelRequested
		for _, e := range hist {
			if p, ok := e.Payload.(*event.RunCancelRequested); ok {
				req = p
			}
		}
		require.NotNil(t, req)
		require.Equal(t, parent, req.Parent)
		code, out := verify(child)
		require.Equal(t, 0, code, out)
	})
}

// Only the input writers may read the input signing key: the worker and client roles are
// refused its bucket's reads.
func TestOnlyInputWritersReadTheKey(t *testing.T) {
	srv, _ := runServer(t, "")
	reads := []string{
		"$JS.API.DIRECT.GET.KV_" + streams.SecretsBucket + ".$KV." + streams.SecretsBucket + "." + inputsig.KeyName,
		"$JS.API.STREAM.MSG.GET.KV_" + streams.SecretsBucket,
		"$KV." + streams.SecretsBucket + "." + inputsig.KeyName,
	}
	for _, name := range []string{natsperm.Worker, natsperm.Client} {
		errs := make(chan error, len(reads))
		nc, err := as(t, srv, name).Dial("probe-key-"+name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		require.NoError(t, err)
		for _, subject := range reads {
			require.NoError(t, nc.Publish(subject, nil))
			require.NoError(t, nc.Flush())
			select {
			case err := <-errs:
				require.ErrorIs(t, err, nats.ErrPermissionViolation, "%s: %s", name, subject)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s may publish to %s", name, subject)
			}
		}
		nc.Close()
	}
}
