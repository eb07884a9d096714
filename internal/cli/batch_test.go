package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchFlagsAreUsageErrors: flow batch checks its flags before it connects (the NATS URL
// points nowhere: a command that passes its checks fails later with exit code 1).
func TestBatchFlagsAreUsageErrors(t *testing.T) {
	t.Parallel()
	nowhere := "--nats-url=nats://127.0.0.1:1"
	for _, tt := range []failure{
		{"NoWhere", []string{"batch", "cancel"}, 2, "--where is required"},
		{"BadRate", []string{"batch", "cancel", "--where", `status = "running"`, "--rate", "fast"}, 2, `--rate "fast" is not a rate`},
		{"RateTooHigh", []string{"batch", "terminate", "--where", `status = "running"`, "--rate", "20000/s"}, 2, "at most 10000"},
		{"SignalNeedsAName", []string{"batch", "signal", "--where", `status = "running"`}, 2, "takes 1 argument(s), NAME"},
		{"BadPayload", []string{"batch", "signal", "poke", "--where", `status = "running"`, "--payload", "{"}, 2, "--payload is not valid JSON"},
		{"BadResetInput", []string{"batch", "reset", "--where", `status = "failed"`, "--mode", "rerun", "--input", "{"}, 2, "--input is not valid JSON"},
		{"StatusNeedsAJob", []string{"batch", "status"}, 2, "takes 1 argument(s), JOB"},
		{"ValidPasses", []string{"batch", "cancel", "--where", `status = "running"`, "--rate", "20/s"}, 1, "NATS unreachable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, append(tt.args, nowhere)...)
			requireFails(t, r.code, r.stderr, tt.code, tt.want)
		})
	}
	r := runCLI(t, "batch", "--help")
	for _, sub := range []string{"cancel", "terminate", "signal", "reset", "pause", "unpause", "status", "list", "stop"} {
		require.Contains(t, r.stdout, sub)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"": 0, "20": 20, "20/s": 20, " 2.5/s": 2.5} {
		got, err := parseRate(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"0", "-1", "x/s", "10001"} {
		_, err := parseRate(in)
		require.Error(t, err, in)
	}
}
