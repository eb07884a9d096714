package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Schedule flags that cannot work are usage errors, found before any connection.
func TestScheduleFlagsAreChecked(t *testing.T) {
	t.Parallel()
	nowhere := "--nats-url=nats://127.0.0.1:1"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "r", "--every", "1m", "--definition", "order", "--overlap", "bufer_one"}, `--overlap "bufer_one" is not one of skip, buffer_one`},
		{[]string{"create", "r", "--every", "1m"}, "--definition is required"},
		{[]string{"create", "r", "--definition", "order"}, "give either --cron"},
		{[]string{"create", "r", "--every", "1m", "--cron", "* * * * *", "--definition", "order"}, "give either --cron"},
		{[]string{"create", "r", "--every", "1m", "--definition", "order", "--input", "{x:1}"}, "--input is not valid JSON"},
		{[]string{"backfill", "r", "--start", "yesterday", "--end", "2026-01-01T00:00:00Z"}, `--start "yesterday" is not an RFC 3339 time`},
		{[]string{"trigger", "r", "--overlap", "all"}, `--overlap "all" is not one of`},
	} {
		r := runCLI(t, append(append([]string{"schedule"}, tt.args...), nowhere)...)
		require.Equal(t, 2, r.code, "%v: %s", tt.args, r.stderr)
		require.Contains(t, r.stderr, tt.want)
	}
}

// `flow schedule` against `flow dev`: create (and its refusals), list, describe with the recent
// actions, trigger, status of a scheduled run, delete.
func TestScheduleFromTheCLI(t *testing.T) {
	t.Parallel()
	nats := startDev(t)
	r := runCLI(t, "schedule", "create", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Berlyn", "--definition", "reminder", nats)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown time zone "Europe/Berlyn"; give an IANA name such as Europe/Berlin`)
	r = runCLI(t, "schedule", "create", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--definition", "remindr", nats)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `"remindr"`)

	// The example worker registers its definitions, and the scheduler takes the lead of the
	// schedule runner (which alone writes schedules), a moment after flow dev says it runs.
	require.Eventually(t, func() bool {
		r = runCLI(t, "schedule", "create", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--definition", "reminder",
			"--input", `{"who":"ann","after":"1s"}`, nats)
		return r.code == 0 || !strings.Contains(r.stderr, "no live worker") && !strings.Contains(r.stderr, "the scheduler is not running")
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `schedule nightly created (cron "30 2 * * *" in Europe/Berlin)`)
	require.Contains(t, r.stdout, "nightly-20")
	r = runCLI(t, "schedule", "create", "nightly", "--every", "1h", "--definition", "reminder", nats)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `schedule "nightly" exists`)

	r = runCLI(t, "schedule", "trigger", "nightly", "--request-id", "cli-1", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "schedule nightly triggered: run nightly-t")
	run := strings.Fields(strings.SplitN(r.stdout, "run ", 2)[1])[0]
	r = runCLI(t, "schedule", "trigger", "nightly", "--request-id", "cli-1", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "trigger cli-1 of schedule nightly was taken already")

	require.Eventually(t, func() bool {
		r = runCLI(t, "status", run, nats)
		return r.code == 0 && strings.Contains(r.stdout, "Status      completed")
	}, 20*time.Second, 50*time.Millisecond, "%s", r.stderr)
	require.Contains(t, r.stdout, "Schedule    nightly, slot ")
	require.Contains(t, r.stdout, "(trigger; `flow schedule describe nightly`)")

	r = runCLI(t, "schedule", "describe", "nightly", "--next", "2", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Policies    overlap skip, catch-up window 1h0m0s")
	require.Contains(t, r.stdout, run+"  started")
	require.Equal(t, 2, strings.Count(r.stdout, "  nightly-20"), r.stdout)

	r = runCLI(t, "schedule", "pause", "nightly", "--note", "holiday", nats)
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, "schedule", "list", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "nightly")
	require.Contains(t, r.stdout, "paused")
	r = runCLI(t, "schedule", "list", "--json", nats)
	require.Equal(t, 0, r.code, r.stderr)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 1)

	r = runCLI(t, "schedule", "delete", "nightly", nats)
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, "schedule", "describe", "nightly", nats)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `schedule "nightly" does not exist`)
}
