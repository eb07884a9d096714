package flow

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/batch"
)

// The SDK's batch types are the batch API's JSON: each has the fields and JSON names of the
// server's type (but those the server keeps to itself), the same constants, and the same
// reading of a rate, so that a field added on one side and not the other fails here.
func TestBatchWire(t *testing.T) {
	fields := func(v any, except ...string) map[string]string {
		out := map[string]string{}
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			out[f.Name] = f.Tag.Get("json")
		}
		for _, name := range except {
			delete(out, name)
		}
		return out
	}
	for _, pair := range []struct {
		sdk, server map[string]string
	}{
		{fields(BatchJob{}), fields(batch.Job{}, "Schema")},
		{fields(BatchSpec{}), fields(batch.Spec{})},
		{fields(BatchReset{}), fields(batch.ResetSpec{})},
		{fields(BatchNote{}), fields(batch.Note{})},
		{fields(batchCreateRequest{}), fields(api.BatchCreateRequest{})},
		{fields(batchResponse{}), fields(api.BatchResponse{}, "Created", "DryRun")},
		{fields(batchListRequest{}), fields(api.BatchListRequest{})},
		{fields(batchListResponse{}), fields(api.BatchListResponse{}, "Total")},
	} {
		require.Equal(t, pair.server, pair.sdk)
	}

	now := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	server := batch.Job{ID: "j1", State: batch.StateRunning, CreatedAt: now, StartedAt: now.Add(time.Second), UpdatedAt: now.Add(2 * time.Second),
		Spec: batch.Spec{Op: batch.OpReset, Where: `status = "failed"`, Definition: "order", Reason: "fix", Rate: 5,
			Reset: &batch.ResetSpec{Mode: "rerun", StepID: "charge", Input: json.RawMessage(`{"n":1}`), DropInputs: true}},
		Total: 10, Chunks: 1, Cursor: 4, Applied: 2, Skipped: map[string]int{"already completed": 1}, Failed: 1,
		Failures: []batch.Note{{RunID: "r1", Reason: "gone"}}, Skips: []batch.Note{{RunID: "r2", Reason: "already completed"}},
		StopRequested: true, StopReason: "enough", Error: "none", Executor: "sched-1"}
	b, err := json.Marshal(server)
	require.NoError(t, err)
	var sdk BatchJob
	require.NoError(t, json.Unmarshal(b, &sdk))
	b, err = json.Marshal(sdk)
	require.NoError(t, err)
	var back batch.Job
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, server, back)
	require.Equal(t, server.SkippedTotal(), sdk.SkippedTotal())
	require.Equal(t, server.Rate(now.Add(5*time.Second)), sdk.Rate(now.Add(5*time.Second)))
	require.Equal(t, batch.Spec{}.EffectiveRate(), BatchSpec{}.EffectiveRate())
	require.Equal(t, server.Spec.EffectiveRate(), sdk.Spec.EffectiveRate())

	for sdk, server := range map[BatchOp]batch.Op{BatchCancel: batch.OpCancel, BatchTerminate: batch.OpTerminate, BatchSignal: batch.OpSignal,
		BatchResetOp: batch.OpReset, BatchPause: batch.OpPause, BatchUnpause: batch.OpUnpause} {
		require.Equal(t, string(server), string(sdk))
	}
	require.Len(t, batch.Ops, 6)
	for sdk, server := range map[BatchState]batch.State{BatchPending: batch.StatePending, BatchRunning: batch.StateRunning,
		BatchCompleted: batch.StateCompleted, BatchStopped: batch.StateStopped, BatchFailed: batch.StateFailed} {
		require.Equal(t, string(server), string(sdk))
		require.Equal(t, server.Ended(), sdk.Ended(), sdk)
	}
}
