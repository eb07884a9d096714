package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Start policy flags that cannot work are usage errors, found before any connection.
func TestStartPolicyFlagsAreChecked(t *testing.T) {
	t.Parallel()
	nowhere := "--nats-url=nats://127.0.0.1:1"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--on-conflict", "replace"}, `--on-conflict "replace" is not one of fail, use_existing, terminate_existing`},
		{[]string{"--reuse", "sometimes"}, `--reuse "sometimes" is not one of refuse, allow, allow_failed_only`},
		{[]string{"--dedup-key", "k"}, "--dedup-key and --dedup-window go together"},
		{[]string{"--debounce-period", "1s"}, "--debounce-key and --debounce-period go together"},
	} {
		r := runCLI(t, append(append([]string{"start", "order"}, tt.args...), nowhere)...)
		require.Equal(t, 2, r.code, r.stderr)
		require.Contains(t, r.stderr, tt.want)
	}
}

// `flow start` with a delay and a conflict policy; `flow status` shows the delay, the policy and
// the ID's latest run.
func TestStartPoliciesFromTheCLI(t *testing.T) {
	t.Parallel()
	nats := startDev(t)
	r := runCLI(t, "start", "reminder", "--input", `{"after":"1h"}`, "--id", "cli-later", "--delay", "1h", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "cli-later\n", r.stdout)
	r = runCLI(t, "status", "cli-later", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Status      suspended")
	require.Contains(t, r.stdout, "Delayed     until ")

	r = runCLI(t, "start", "reminder", "--input", `{"after":"2h"}`, "--id", "cli-later", nats)
	require.Equal(t, 1, r.code, "another input for an active run's ID is refused by default")
	require.Contains(t, r.stderr, "already exists")
	r = runCLI(t, "start", "reminder", "--input", `{"after":"2h"}`, "--id", "cli-later", "--on-conflict", "terminate_existing", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "cli-later=_1\n", r.stdout)
	r = runCLI(t, "status", "cli-later", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Status      failed")
	require.Contains(t, r.stdout, "Latest run  cli-later=_1")
	r = runCLI(t, "status", "cli-later=_1", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Start       replaced run cli-later (terminate_existing)")

	r = runCLI(t, "start", "reminder", "--input", `{"after":"1h"}`, "--dedup-key", "nightly", "--dedup-window", "1h", nats)
	require.Equal(t, 0, r.code, r.stderr)
	first := strings.TrimSpace(r.stdout)
	r = runCLI(t, "start", "reminder", "--input", `{"after":"3h"}`, "--dedup-key", "nightly", "--dedup-window", "1h", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, first, strings.TrimSpace(r.stdout), "the dedup key's run")
}
