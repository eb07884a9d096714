package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProject(t *testing.T) {
	results := []Result{
		{System: "flow", Variant: "sync=default,R3,P3", Workload: "W2",
			Metrics: map[string]float64{"wf_per_s": 600, "runs": 2000, "history_msgs_per_step": 1.0, "msgs_per_step_FLOW_TASKS": 0.2,
				"msgs_per_step_KV_FLOW_RUNS": 0.3},
			Processes: map[string]Process{"flow": {CPUSeconds: 2}, "nats": {CPUSeconds: 1}, "nats-2": {CPUSeconds: 1}, "nats-3": {CPUSeconds: 1}}},
		{System: "flow", Variant: "sync=default,R3,P3", Workload: "ceiling-1000", Metrics: map[string]float64{"appends_per_s": 30000}},
		{System: "flow", Variant: "sync=default,R3", Workload: "ceiling-1000", Metrics: map[string]float64{"appends_per_s": 20000}},
	}
	in, err := ProjectionInputsOf(results, "sync=default,R3,P3")
	require.NoError(t, err)
	require.Equal(t, 3, in.Partitions)
	require.InDelta(t, 0.001, in.FlowCPUPerWf, 1e-9)
	require.InDelta(t, 0.0015, in.NATSCPUPerWf, 1e-9)
	require.InDelta(t, 10, in.HistoryMsgsPerWf, 1e-9)
	require.InDelta(t, 3, in.OtherMsgsPerWf, 1e-9)
	require.Equal(t, "KV_FLOW_RUNS", in.OtherStream)
	require.InDelta(t, 20000, in.StreamCeiling, 1e-9, "one stream's ceiling comes from the variant of one stream")
	require.Equal(t, "sync=default,R3", in.CeilingVariant)

	ps := Project(in, []int{3, 9}, 8)
	require.InDelta(t, 24/0.0025, ps[0].CPU, 1e-6)
	require.InDelta(t, 3*20000/10.0, ps[0].History, 1e-6)
	require.InDelta(t, 20000/3.0, ps[0].Other, 1e-6)
	require.Equal(t, "history streams", ps[0].Bound, "three partitions bind first")
	require.InDelta(t, 6000, ps[0].Projected, 1e-6)
	require.Equal(t, "KV_FLOW_RUNS", ps[1].Bound, "on nine, the busiest unpartitioned stream")
	require.InDelta(t, 20000/3.0, ps[1].Projected, 1e-6)
	require.InDelta(t, 2000, ps[0].OneStream, 1e-6, "one history stream binds at its own ceiling")

	_, err = ProjectionInputsOf(results, "sync=always,R3,P3")
	require.ErrorContains(t, err, "needs both W2 and ceiling-1000")
}
