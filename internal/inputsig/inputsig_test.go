package inputsig_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/inputsig"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
)

func key(t *testing.T, b byte) *inputsig.Key {
	t.Helper()
	k, err := inputsig.NewKey(bytes.Repeat([]byte{b}, 32), 0)
	require.NoError(t, err)
	return k
}

// commit returns a commit of run runID at seq first: a step completion and a signal.
func commit(runID string, first uint64) ([]event.Envelope, []json.RawMessage) {
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	envs := []event.Envelope{
		{RunID: runID, Seq: first, Time: at, Payload: &event.StepCompleted{StepID: "s", Attempt: 1, Output: json.RawMessage(`1`)}},
		{RunID: runID, Seq: first + 1, Time: at, Payload: &event.SignalReceived{Name: "go", Payload: json.RawMessage(`{"a":1}`), DeliveryID: "d"}},
	}
	return envs, []json.RawMessage{json.RawMessage(`{"step_id":"s","attempt":1,"output":1}`), json.RawMessage(`{"name":"go","payload":{"a":1},"delivery_id":"d"}`)}
}

// A signature holds for its run, its sequences and its payloads only, and only under its key.
func TestSignatureBindsRunPositionAndPayload(t *testing.T) {
	k := key(t, 1)
	envs, payloads := commit("r1", 4)
	sig := k.Sign("r1", envs, payloads)
	require.NotEmpty(t, sig)
	require.NoError(t, k.Verify("r1", envs, payloads, sig))

	// Copied into another run.
	other, _ := commit("r2", 4)
	require.ErrorIs(t, k.Verify("r2", other, payloads, sig), inputsig.ErrUnsigned)
	// Moved to another position of the run.
	later, _ := commit("r1", 5)
	err := k.Verify("r1", later, payloads, sig)
	require.ErrorIs(t, err, inputsig.ErrUnsigned)
	require.ErrorIs(t, err, event.ErrMalformed)
	require.Contains(t, err.Error(), `signal.received at seq 6 of run "r1" is not written by an input writer`)
	// Another payload.
	changed := append([]json.RawMessage(nil), payloads...)
	changed[1] = json.RawMessage(`{"name":"go","payload":{"a":2},"delivery_id":"d"}`)
	require.ErrorIs(t, k.Verify("r1", envs, changed, sig), inputsig.ErrUnsigned)
	// Another key, or none.
	require.ErrorIs(t, key(t, 2).Verify("r1", envs, payloads, sig), inputsig.ErrUnsigned)
	err = k.Verify("r1", envs, payloads, "")
	require.ErrorIs(t, err, inputsig.ErrUnsigned)
	require.Contains(t, err.Error(), "header is missing")
}

// Commits without input events need no signature; a parent's cancellation request is no input.
func TestWhatIsAnInput(t *testing.T) {
	k := key(t, 1)
	at := time.Now()
	envs := []event.Envelope{{RunID: "r", Seq: 2, Time: at, Payload: &event.RunCancelRequested{Reason: "parent ended", Parent: "p"}}}
	require.Empty(t, k.Sign("r", envs, []json.RawMessage{json.RawMessage(`{}`)}))
	require.NoError(t, k.Verify("r", envs, nil, ""))
	for _, p := range []event.Payload{
		&event.SignalReceived{}, &event.HookReceived{}, &event.UpdateReceived{}, &event.RunCancelRequested{},
		&event.RunPaused{Cause: event.PauseOperator}, &event.RunUnpaused{},
	} {
		require.True(t, inputsig.IsInput(p), "%s", p.EventType())
	}
	for _, p := range []event.Payload{
		&event.RunCancelRequested{Parent: "p"}, &event.RunPaused{Cause: event.PauseStepExhausted}, &event.StepCompleted{},
		&event.RunStarted{}, &event.RunFailed{Cause: event.CauseOperator}, &event.ChildSettled{},
	} {
		require.False(t, inputsig.IsInput(p), "%s", p.EventType())
	}
}

// Load creates the key once, with the history stream's last sequence as its epoch, and every
// later Load, concurrent or not, reads that key.
func TestLoadCreatesTheKeyOnce(t *testing.T) {
	srv := natstest.RunJetStream(t)
	js := natstest.JetStream(t, srv)
	require.NoError(t, streams.Ensure(t.Context(), js, streams.Config{}))
	_, err := js.Publish(t.Context(), streams.Layout{}.Subject("old"), []byte("written before the key"))
	require.NoError(t, err)
	keys := make(chan *inputsig.Key, 4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			k, err := inputsig.Load(t.Context(), js)
			keys <- k
			errs <- err
		}()
	}
	var first *inputsig.Key
	envs, payloads := commit("r", 1)
	for range 4 {
		require.NoError(t, <-errs)
		k := <-keys
		require.Equal(t, uint64(1), k.Epoch)
		if first == nil {
			first = k
			continue
		}
		require.NoError(t, k.Verify("r", envs, payloads, first.Sign("r", envs, payloads)), "every Load reads the one key")
	}
	_, err = inputsig.NewKey([]byte("short"), 0)
	require.True(t, err != nil && !errors.Is(err, inputsig.ErrUnsigned))
}

// BenchmarkVerify measures the check of a commit holding one 1 KiB signal, which every store
// with the key makes for each such commit it reads.
func BenchmarkVerify(b *testing.B) {
	k, err := inputsig.NewKey(bytes.Repeat([]byte{1}, 32), 0)
	require.NoError(b, err)
	payload := json.RawMessage(`{"name":"go","payload":"` + string(bytes.Repeat([]byte{'x'}, 1024)) + `","delivery_id":"d"}`)
	envs := []event.Envelope{{RunID: "r", Seq: 9, Payload: &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d"}}}
	payloads := []json.RawMessage{payload}
	sig := k.Sign("r", envs, payloads)
	b.ReportAllocs()
	for b.Loop() {
		if err := k.Verify("r", envs, payloads, sig); err != nil {
			b.Fatal(err)
		}
	}
}
