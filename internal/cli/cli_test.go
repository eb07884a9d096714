package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/cli"
	"github.com/flowrun/flow/internal/syncbuf"
)

// devRun is a `flow dev` the test started, with its output.
type devRun struct {
	out, err *syncbuf.Buffer
	stop     context.CancelFunc
	done     chan int
	// dir is its data directory.
	dir string
}

// startDev runs `flow dev` with args (after "dev --dir <temp> --log-level warn") until it says it
// is running.
func startDev(t *testing.T, args ...string) *devRun {
	t.Helper()
	// The directory is made before the goroutine, so that its removal is registered before any
	// cleanup that stops the run, and runs after it.
	return startDevIn(t, t.TempDir(), args...)
}

// startDevIn is startDev with data directory dir.
func startDevIn(t *testing.T, dir string, args ...string) *devRun {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	d := &devRun{out: &syncbuf.Buffer{}, err: &syncbuf.Buffer{}, stop: stop, done: make(chan int, 1), dir: dir}
	go func() {
		d.done <- cli.Main(ctx, append([]string{"dev", "--dir", dir}, args...), d.out, d.err)
	}()
	require.Eventually(t, func() bool { return strings.Contains(d.out.String(), "Flow is running.") }, 20*time.Second, 10*time.Millisecond,
		"flow dev did not start: %s", d.err.String())
	return d
}

// startDevListening is startDev with NATS on a free port (--listen); it returns the NATS URL too.
func startDevListening(t *testing.T, args ...string) (*devRun, string) {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return startDev(t, append([]string{"--listen", listen}, args...)...), "nats://" + listen
}

// stopAndWait stops the `flow dev` and requires it to exit with 0.
func (d *devRun) stopAndWait(t *testing.T) {
	t.Helper()
	d.stop()
	select {
	case code := <-d.done:
		require.Equal(t, 0, code, d.err.String())
	case <-time.After(30 * time.Second):
		t.Fatal("flow dev did not stop")
	}
}

// freePort returns a TCP port on 127.0.0.1 that no one listens on.
var freePort = cli.FreePort

type result struct {
	code           int
	stdout, stderr string
}

// failure is a command line (args) that must fail with exit code code and one line on stderr
// that contains want (cli.RequireFails); name names its subtest.
type failure struct {
	name string
	args []string
	code int
	want string
}

// run runs the CLI with args.
func run(t *testing.T, args ...string) result {
	t.Helper()
	code, stdout, stderr := cli.Run(t, args...)
	return result{code: code, stdout: stdout, stderr: stderr}
}

// TestTour runs `flow dev` and drives it the way the README's tour does.
func TestTour(t *testing.T) {
	t.Parallel()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dev, url := startDevListening(t, "--http", httpAddr, "--ingress-http", "127.0.0.1:0")
	require.Contains(t, dev.out.String(), "flow start order --wait")
	nats := "--server=" + url

	t.Run("StartOrderAndWait", func(t *testing.T) {
		r := run(t, "start", "order", "--wait", "--id", "order-2026-0001", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.True(t, strings.HasPrefix(r.stdout, "run order-2026-0001\n"), r.stdout)
		require.Contains(t, r.stdout, "run.completed")
		require.Contains(t, r.stdout, "\ncompleted: ")
		require.Contains(t, r.stdout, "order-2026-0001:reserve-stock:sku-8842")

		r = run(t, "status", "order-2026-0001", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "Status      completed")
		require.Contains(t, r.stdout, "charge-payment  chargePayment  completed  2")

		r = run(t, "history", "order-2026-0001", "--json", nats)
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 11)
		var first map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
		require.Equal(t, "run.started", first["type"])

		r = run(t, "verify", "order-2026-0001", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "11 events, all invariants hold")

		r = run(t, "watch", "order-2026-0001", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "run.completed")

		r = run(t, "status", "order-2026-0001", "--at", "2", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "As of seq 2 of 11")
		require.Contains(t, r.stdout, "Status      running")
		require.Contains(t, r.stdout, "reserve-stock  reserveStock  running")
		r = run(t, "status", "order-2026-0001", "--at", "12", nats)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "has 11 events; ask for a sequence from 1 to 11")

		r = run(t, "resume", "order-2026-0001", nats)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "has ended (completed); there is nothing to resume")

		req, err := http.NewRequest(http.MethodGet, "http://"+httpAddr+"/v1/runs/order-2026-0001?at=11", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+devToken(t, dev))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { require.NoError(t, resp.Body.Close()) }()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var got struct {
			Snapshot struct{ Status string } `json:"snapshot"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		require.Equal(t, "completed", got.Snapshot.Status)
	})

	t.Run("StartIsIdempotent", func(t *testing.T) {
		r := run(t, "start", "fanout", "--input", `{"items":3}`, "--id", "fanout-1", "--wait", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, `completed: {"items":3,"sum":5}`)
		r = run(t, "start", "fanout", "--input", `{"items":3}`, "--id", "fanout-1", nats)
		require.Equal(t, 0, r.code, r.stderr)
		r = run(t, "start", "fanout", "--input", `{"items":4}`, "--id", "fanout-1", nats)
		require.Equal(t, 1, r.code)
		require.Equal(t, "flow: run \"fanout-1\" already exists with a different input; starting it again needs the same definition, spec and input, or choose another run ID\n", r.stderr)
	})

	t.Run("CancelAWaitingRun", func(t *testing.T) {
		r := run(t, "start", "reminder", "--input", `{"after":"1h"}`, "--id", "later", nats)
		require.Equal(t, 0, r.code, r.stderr)
		r = run(t, "cancel", "later", nats)
		require.Equal(t, 0, r.code, r.stderr)
		r = run(t, "start", "reminder", "--input", `{"after":"1h"}`, "--id", "later", "--wait", "--json", nats)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stdout, `"error":"flow: run \"later\" cancelled: cancelled: cancellation requested: cancelled from the command line"`)
	})

	t.Run("Runs", func(t *testing.T) {
		require.Eventually(t, func() bool {
			r := run(t, "runs", "--json", nats)
			var runs []map[string]any
			return r.code == 0 && json.Unmarshal([]byte(r.stdout), &runs) == nil && len(runs) >= 3
		}, 10*time.Second, 20*time.Millisecond)
		r := run(t, "runs", "--status", "completed", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "order-2026-0001")
		require.NotContains(t, r.stdout, "later")
		r = run(t, "runs", "--definition", "fanout", "--since", "1h", "--status", "completed,failed", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "fanout-1")
		require.NotContains(t, r.stdout, "order-2026-0001")
		r = run(t, "runs", "--limit", "1", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "More: flow runs --cursor ")
		r = run(t, "runs", "--definition", "nothing-like-it", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "No runs match.\n", r.stdout)
		r = run(t, "runs", "--since", "yesterday-ish", nats)
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, "--since must be an RFC 3339 time")
	})

	t.Run("SearchAttributes", func(t *testing.T) {
		r := run(t, "start", "order", "--id", "order-c42", "--attr", "customer=c-42", "--attr", "amount=120", "--attr", "tags=eu,vip", "--wait", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Eventually(t, func() bool {
			r := run(t, "runs", "--where", `customer = "c-42" and amount >= 100 and tags contains "vip" and status = "completed"`, nats)
			return r.code == 0 && strings.Contains(r.stdout, "order-c42")
		}, 10*time.Second, 20*time.Millisecond)
		r = run(t, "runs", "--where", `customer = "c-42"`, nats)
		require.Contains(t, r.stdout, "ATTRIBUTES")
		require.Contains(t, r.stdout, `amount=120 customer="c-42" tags=["eu","vip"]`)
		require.NotContains(t, r.stdout, "order-2026-0001")
		r = run(t, "runs", "--where", `amount = "120"`, nats)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "invalid filter at column 10: amount is an int, and string \"120\" is not one; use an integer literal, e.g. 42")
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		r = run(t, "start", "order", "--attr", "amount=lots", nats)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, `search attribute "amount"`)
		r = run(t, "start", "order", "--attr", "customer", nats)
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, `--attr "customer" is not NAME=VALUE; write e.g. --attr customer=c-42`)
	})

	t.Run("UpdateApproval", func(t *testing.T) {
		r := run(t, "start", "approval", "--id", "approval-upd", "--input", `{"timeout":"10m"}`, nats)
		require.Equal(t, 0, r.code, r.stderr)
		r = run(t, "update", "approval-upd", "note", "--payload", `"looks good"`, "--wait", "--id", "n1", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.JSONEq(t, `{"noted":"looks good","updates":1}`, r.stdout)
		r = run(t, "update", "approval-upd", "note", "--payload", `"looks good"`, "--wait", "--id", "n1", "--json", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, `"status": "completed"`)
		r = run(t, "update", "approval-upd", "note", "--payload", `""`, "--wait", nats)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "was rejected")
		r = run(t, "update", "approval-upd", "note", "--payload", `{nope`, nats)
		require.Equal(t, 2, r.code)
		r = run(t, "status", "approval-upd", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "Update n1 (note): completed at seq")
	})

	t.Run("BadInputIsOneLineAndNonZero", func(t *testing.T) {
		for _, tt := range []failure{
			{"UnknownDefinition", []string{"start", "ordr", nats}, 1, `flow: no live worker serves workflow "ordr" on queue "default" (never registered; known on this queue: approval, child, fanout, invoice, order, parent, reminder, webhook); start a worker that registers it`},
			{"MalformedInput", []string{"start", "order", "--input", "{sku:1}", nats}, 2, "flow: --input is not valid JSON"},
			{"InvalidRunID", []string{"start", "order", "--id", "orders.1", nats}, 1, `flow: invalid ID: run ID "orders.1" has '.' at position 6`},
			{"MissingRun", []string{"status", "no-such-run", nats}, 1, `flow: not found: run "no-such-run" does not exist (list runs with ` + "`flow runs`)"},
			{"MissingRunHistory", []string{"history", "no-such-run", nats}, 1, `does not exist`},
			{"MissingRunCancel", []string{"cancel", "no-such-run", nats}, 1, `no-such-run`},
			{"Unreachable", []string{"runs", "--nats-url", "nats://127.0.0.1:1"}, 1, "flow: NATS unreachable: cannot connect to nats://127.0.0.1:1 (from --nats-url): "},
			{"UnreachableShort", []string{"runs", "-s", "nats://127.0.0.1:1"}, 1, "flow: NATS unreachable: cannot connect to nats://127.0.0.1:1 (from --server): "},
			{"MissingArgument", []string{"status", nats}, 2, "flow: flow status takes 1 argument(s), RUN; got 0"},
			{"UnknownFlag", []string{"runs", "--colour", nats}, 2, "flow: unknown flag: --colour"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := run(t, tt.args...)
				cli.RequireFails(t, r.code, r.stderr, tt.code, tt.want)
			})
		}
	})

	dev.stopAndWait(t)
	require.Contains(t, dev.out.String(), "Stopped.")
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"", "dev", "start", "status", "history", "watch", "runs", "cancel", "signal", "hook", "terminate", "resume", "verify", "definitions", "version", "query", "update", "schedule"} {
		t.Run("Help"+cmd, func(t *testing.T) {
			args := []string{"--help"}
			if cmd != "" {
				args = []string{cmd, "--help"}
			}
			r := run(t, args...)
			require.Equal(t, 0, r.code, r.stderr)
			require.Contains(t, r.stdout, "Usage:")
		})
	}
}

func TestVerifyFile(t *testing.T) {
	t.Parallel()
	good := filepath.Join("..", "..", "pkg", "flowtest", "testdata", "order_v1.jsonl")
	r := run(t, "verify", "--file", good)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "all invariants hold")

	lines, err := os.ReadFile(good)
	require.NoError(t, err)
	all := strings.Split(strings.TrimSpace(string(lines)), "\n")
	bad := filepath.Join(t.TempDir(), "gap.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Join(append(all[:3:3], all[4:]...), "\n")), 0o644))
	r = run(t, "verify", "--file", bad)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "seq 5: sequence: expected seq 4, got 5")
	require.Regexp(t, `^flow: run "order-1": \d+ invariant violation\(s\)\n$`, r.stderr)

	r = run(t, "verify", "--file", filepath.Join(t.TempDir(), "missing.jsonl"))
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no such file")
}
