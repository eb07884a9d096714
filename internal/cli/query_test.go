package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cli"
)

// TestQueryCommand asks the approval example's "status" query with `flow query`.
func TestQueryCommand(t *testing.T) {
	t.Parallel()
	dev, url := startDevListening(t, "--http", "127.0.0.1:0", "--ingress-http", "127.0.0.1:0")
	nats := "--server=" + url

	r := run(t, "start", "approval", "--id", "approval-q", "--input", `{"who":"ann","timeout":"1h"}`, nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		r := run(t, "query", "approval-q", "status", nats)
		return r.code == 0 && strings.Contains(r.stdout, `"deadline"`)
	}, 20*time.Second, 20*time.Millisecond, "the run records its deadline")

	r = run(t, "query", "approval-q", "status", "--args", `{}`, nats)
	require.Equal(t, 0, r.code, r.stderr)
	var st struct {
		Who     string `json:"who"`
		Waiting bool   `json:"waiting"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, "ann", st.Who)
	require.True(t, st.Waiting)

	r = run(t, "query", "approval-q", "status", "--json", nats)
	require.Equal(t, 0, r.code, r.stderr)
	var res api.QueryResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.Equal(t, "approval-q", res.RunID)
	require.Equal(t, "status", res.Query)
	require.Equal(t, "suspended", string(res.Status))

	for _, tt := range []failure{
		{"UnknownQuery", []string{"query", "approval-q", "eta", nats}, 1, `has no query "eta"; it handles status`},
		{"UnknownRun", []string{"query", "no-such-run", "status", nats}, 1, `not found`},
		{"BadArgs", []string{"query", "approval-q", "status", "--args", `[1]`, nats}, 1, `the arguments of query "status" (run "approval-q") do not decode`},
		{"ArgsNotJSON", []string{"query", "approval-q", "status", "--args", `{who`, nats}, 2, `--args is not valid JSON`},
		{"MissingName", []string{"query", "approval-q", nats}, 2, `flow query takes 2 argument(s), RUN NAME; got 1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.args...)
			cli.RequireFails(t, r.code, r.stderr, tt.code, tt.want)
		})
	}
	dev.stopAndWait(t)
}
