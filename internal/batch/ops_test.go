package batch_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/batch"
	"github.com/flowrun/flow/internal/core"
)

// fakeEngine records the calls of the operations.
type fakeEngine struct{ calls []string }

func (f *fakeEngine) CancelDelivery(_ context.Context, runID, reason, deliveryID string) (string, error) {
	f.calls = append(f.calls, fmt.Sprintf("cancel %s %q %s", runID, reason, deliveryID))
	return runID, nil
}

func (f *fakeEngine) TerminateDelivery(_ context.Context, runID, reason, deliveryID string) (string, error) {
	f.calls = append(f.calls, fmt.Sprintf("terminate %s %q %s", runID, reason, deliveryID))
	return runID, nil
}

func (f *fakeEngine) Signal(_ context.Context, runID, name string, payload []byte, deliveryID string) (string, error) {
	f.calls = append(f.calls, fmt.Sprintf("signal %s %s %s %s", runID, name, payload, deliveryID))
	return runID, nil
}

func (f *fakeEngine) Snapshot(context.Context, string) (*core.Snapshot, error) {
	return nil, errors.New("not here")
}

type pausingEngine struct{ fakeEngine }

func (p *pausingEngine) Pause(_ context.Context, runID, reason, deliveryID string) (string, error) {
	p.calls = append(p.calls, fmt.Sprintf("pause %s %q %s", runID, reason, deliveryID))
	return runID, nil
}

func (p *pausingEngine) Unpause(_ context.Context, runID, reason, deliveryID string) (string, error) {
	p.calls = append(p.calls, fmt.Sprintf("unpause %s %q %s", runID, reason, deliveryID))
	return runID, nil
}

func (p *pausingEngine) ResetRun(_ context.Context, runID string, r batch.ResetSpec, reason, requestID string) (string, error) {
	p.calls = append(p.calls, fmt.Sprintf("reset %s %s %q %s", runID, r.Mode, reason, requestID))
	return runID + "=_reset", nil
}

// TestOperations: each entry of the dispatch table calls its engine operation with the
// target's delivery ID; pause and unpause need an engine that pauses.
func TestOperations(t *testing.T) {
	ctx := context.Background()
	spec := batch.Spec{Reason: "why", Signal: "poke", Payload: []byte(`{"a":1}`), Reset: &batch.ResetSpec{Mode: "last_decision"}}
	target := batch.Target{JobID: "j", RunID: "r", DeliveryID: batch.DeliveryID("j", "r"), Spec: &spec}
	e := &pausingEngine{}
	for _, op := range []batch.Op{batch.OpCancel, batch.OpTerminate, batch.OpSignal, batch.OpPause, batch.OpUnpause, batch.OpReset} {
		_, err := batch.Operations[op](ctx, e, target)
		require.NoError(t, err, op)
		require.NoError(t, batch.Supported(e, op))
	}
	require.Equal(t, []string{`cancel r "why" batch:j:r`, `terminate r "why" batch:j:r`, `signal r poke {"a":1} batch:j:r`,
		`pause r "why" batch:j:r`, `unpause r "why" batch:j:r`, `reset r last_decision "why" batch:j:r`}, e.calls)

	plain := &fakeEngine{}
	for _, op := range []batch.Op{batch.OpPause, batch.OpUnpause, batch.OpReset} {
		_, err := batch.Operations[op](ctx, plain, target)
		require.ErrorIs(t, err, batch.ErrUnsupported)
		require.ErrorIs(t, batch.Supported(plain, op), batch.ErrUnsupported)
	}
	for _, op := range batch.Ops {
		require.Contains(t, batch.Operations, op, "every operation has an entry")
	}
}
