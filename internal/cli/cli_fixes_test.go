package cli

// Tests of what new users of the CLI hit: `start --wait` streaming, --json everywhere, checked
// enumerated flags, --version, history times and rune-safe truncation, and the status of ended
// runs. They are in package cli to reach the pure helpers (truncate, readBuildInfo,
// printSnapshot); the end-to-end ones drive a `flow dev` of their own, as cli_test.go does.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/syncbuf"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs Main with args and returns its exit code and what it wrote.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(t.Context(), args, &out, &errOut)
	return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

// failure is a command line (args) that must fail with exit code code and one line on stderr
// that contains want; name names its subtest.
type failure struct {
	name string
	args []string
	code int
	want string
}

// requireFails requires a command that exited with code, writing stderr, to have failed with
// wantCode and one line on stderr that contains want.
func requireFails(t *testing.T, code int, stderr string, wantCode int, want string) {
	t.Helper()
	require.Equal(t, wantCode, code, stderr)
	require.Contains(t, stderr, want)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
}

// unusedPort returns a TCP port on 127.0.0.1 that no one listens on.
func unusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startDev runs `flow dev` (embedded nats-server, history service, worker, scheduler and the
// example workflows) until the test ends, and returns the --nats-url flag that reaches it.
func startDev(t *testing.T) string {
	t.Helper()
	url := fmt.Sprintf("nats://127.0.0.1:%d", unusedPort(t))
	ctx, stop := context.WithCancel(context.Background())
	var out, errOut syncbuf.Buffer
	done := make(chan int, 1)
	dir := t.TempDir() // before the goroutine: removed only after the cleanup below stops flow dev
	go func() {
		done <- Main(ctx, []string{"dev", "--dir", dir, "--listen", strings.TrimPrefix(url, "nats://"),
			"--http", "off", "--ingress-http", "127.0.0.1:0", "--log-level", "warn"}, &out, &errOut)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-done:
			require.Equal(t, 0, code, errOut.String())
		case <-time.After(30 * time.Second):
			t.Error("flow dev did not stop")
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "Flow is running.") }, 20*time.Second, 10*time.Millisecond,
		"flow dev did not start: %s", errOut.String())
	return "--nats-url=" + url
}

// jsonLines decodes each line of out as a JSON object.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &obj), "not a JSON line: %q", line)
		objs = append(objs, obj)
	}
	return objs
}

func TestCLIFixes(t *testing.T) {
	t.Parallel()
	nats := startDev(t)

	t.Run("StartWaitStreamsEvents", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			id   string
			args []string
			code int
		}{
			{"Completed", "stream-order", []string{"start", "order"}, 0},
			{"Failed", "stream-bad-reminder", []string{"start", "reminder", "--input", `{"after":"-1s"}`}, 1},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := runCLI(t, append(tt.args, "--wait", "--id", tt.id, nats)...)
				require.Equal(t, tt.code, r.code, r.stderr)
				lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
				require.Equal(t, "run "+tt.id, lines[0])
				require.Contains(t, lines[1], "run.started")
				var types []string
				for _, l := range lines[1:] {
					if m := eventLineRE.FindStringSubmatch(l); m != nil {
						types = append(types, m[1])
					}
				}
				if tt.code == 0 {
					require.Equal(t, "run.completed", types[len(types)-1], r.stdout)
					require.True(t, strings.HasPrefix(lines[len(lines)-1], "completed: {"), r.stdout)
					require.Contains(t, types, "step.retry_scheduled", "the events in between are shown")
				} else {
					require.Equal(t, "run.failed", types[len(types)-1], r.stdout)
					require.Contains(t, r.stderr, `run "`+tt.id+`" failed: invalid_input`)
					require.Contains(t, r.stderr, "see `flow history "+tt.id+"`")
				}
			})
		}
	})

	t.Run("StartWaitShowsTheRunBeforeItEnds", func(t *testing.T) {
		var out, errOut syncbuf.Buffer
		done := make(chan int, 1)
		go func() {
			done <- Main(t.Context(), []string{"start", "reminder", "--input", `{"after":"1h"}`, "--id", "stream-live", "--wait", nats}, &out, &errOut)
		}()
		require.Eventually(t, func() bool {
			return strings.HasPrefix(out.String(), "run stream-live\n") && strings.Contains(out.String(), "wait.scheduled")
		}, 10*time.Second, 10*time.Millisecond, "the run's ID and events are shown while it waits: %q %q", out.String(), errOut.String())
		require.NotContains(t, out.String(), "run.cancelled")
		r := runCLI(t, "cancel", "stream-live", nats)
		require.Equal(t, 0, r.code, r.stderr)
		select {
		case code := <-done:
			require.Equal(t, 1, code)
		case <-time.After(20 * time.Second):
			t.Fatal("start --wait did not return after the run was cancelled")
		}
		require.Contains(t, out.String(), "run.cancel_requested")
		require.Contains(t, out.String(), "run.cancelled")
		require.Contains(t, errOut.String(), `run "stream-live" cancelled`)
	})

	t.Run("StartWaitTimeoutSaysTheRunGoesOn", func(t *testing.T) {
		want := "flow: run stream-timeout did not end within --timeout 300ms; it goes on: follow it with `flow watch stream-timeout`"
		for _, tt := range []struct {
			name string
			json bool
		}{{"Text", false}, {"JSON", true}} {
			t.Run(tt.name, func(t *testing.T) {
				args := []string{"start", "reminder", "--input", `{"after":"1h"}`, "--id", "stream-timeout", "--wait", "--timeout", "300ms", nats}
				if tt.json {
					args = append(args, "--json")
				}
				r := runCLI(t, args...)
				require.Equal(t, 1, r.code, r.stderr)
				require.Equal(t, want+"\n", r.stderr)
				if !tt.json {
					require.True(t, strings.HasPrefix(r.stdout, "run stream-timeout\n"), r.stdout)
					return
				}
				objs := jsonLines(t, r.stdout)
				res := objs[len(objs)-1]
				require.Equal(t, map[string]any{"type": "result", "run_id": "stream-timeout", "error": strings.TrimPrefix(want, "flow: ")}, res)
			})
		}
	})

	t.Run("StartWaitJSONLines", func(t *testing.T) {
		for _, tt := range []struct {
			name   string
			args   []string
			code   int
			status string
		}{
			{"Completed", []string{"start", "fanout", "--input", `{"items":2}`, "--id", "json-fanout"}, 0, "completed"},
			{"Failed", []string{"start", "reminder", "--input", `{"after":"nope"}`, "--id", "json-fails"}, 1, "failed"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := runCLI(t, append(tt.args, "--wait", "--json", nats)...)
				require.Equal(t, tt.code, r.code, r.stderr)
				objs := jsonLines(t, r.stdout)
				require.GreaterOrEqual(t, len(objs), 3)
				for i, ev := range objs[:len(objs)-1] {
					require.Equal(t, float64(i+1), ev["seq"], "events in order: %v", ev)
					require.Contains(t, ev, "data")
				}
				require.Equal(t, "run.started", objs[0]["type"])
				require.Equal(t, "run."+tt.status, objs[len(objs)-2]["type"])
				res := objs[len(objs)-1]
				require.Equal(t, "result", res["type"])
				require.Equal(t, tt.status, res["status"])
				require.Equal(t, objs[0]["run_id"], res["run_id"])
				if tt.code == 0 {
					require.Equal(t, map[string]any{"items": float64(2), "sum": float64(1)}, res["output"])
					require.NotContains(t, res, "error")
				} else {
					require.Contains(t, res["error"], "invalid_input")
					require.NotContains(t, res, "output")
				}
			})
		}
	})

	t.Run("JSONOnEveryCommand", func(t *testing.T) {
		for _, id := range []string{"json-cancel", "json-signal", "json-terminate"} {
			r := runCLI(t, "start", "reminder", "--input", `{"after":"1h"}`, "--id", id, nats)
			require.Equal(t, 0, r.code, r.stderr)
		}
		accepted := func(id string) map[string]any {
			return map[string]any{"run_id": id, "delivered_to": id, "status": "accepted"}
		}
		for _, tt := range []struct {
			name string
			args []string
			want any
		}{
			{"Cancel", []string{"cancel", "json-cancel"}, accepted("json-cancel")},
			{"Signal", []string{"signal", "json-signal", "poke", "--payload", `{"n":1}`}, accepted("json-signal")},
			{"Terminate", []string{"terminate", "json-terminate"}, accepted("json-terminate")},
			{"Verify", []string{"verify", "json-terminate"}, []any{}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := runCLI(t, append(tt.args, "--json", nats)...)
				require.Equal(t, 0, r.code, r.stderr)
				var got any
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
				require.Equal(t, tt.want, got)
			})
		}
		t.Run("Watch", func(t *testing.T) {
			r := runCLI(t, "watch", "json-terminate", "--json", nats)
			require.Equal(t, 0, r.code, r.stderr)
			objs := jsonLines(t, r.stdout)
			require.Equal(t, "run.failed", objs[len(objs)-1]["type"])
		})
		t.Run("Version", func(t *testing.T) {
			r := runCLI(t, "version", "--json")
			require.Equal(t, 0, r.code, r.stderr)
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
			require.NotEmpty(t, got["version"])
		})
	})

	t.Run("HistoryShowsDatesAndCutsAtRunes", func(t *testing.T) {
		who := strings.Repeat("张伟李娜", 60) // 240 characters of 3 bytes each
		input := fmt.Sprintf(`{"who":%q,"after":"1h"}`, who)
		r := runCLI(t, "start", "reminder", "--input", input, "--id", "history-zh", nats)
		require.Equal(t, 0, r.code, r.stderr)
		r = runCLI(t, "history", "history-zh", nats)
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.NotEmpty(t, lines)
		started := lines[0]
		require.True(t, utf8.ValidString(started), "a rune was cut: %q", started)
		require.Regexp(t, `^   1  \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} UTC  run\.started `, started)
		require.True(t, strings.HasSuffix(started, "…"), started)
		payload := started[strings.Index(started, "{"):]
		require.Equal(t, payloadWidth, utf8.RuneCountInString(payload), "cut at %d characters: %q", payloadWidth, payload)
		require.Contains(t, payload, "张伟李娜")
	})

	t.Run("StatusOfAnEndedRunListsNothingPending", func(t *testing.T) {
		r := runCLI(t, "start", "reminder", "--input", `{"after":"1h"}`, "--id", "status-ended", nats)
		require.Equal(t, 0, r.code, r.stderr)
		pending := regexp.MustCompile(`wait  pending until \d{4}-`)
		require.Eventually(t, func() bool { // once the worker has decided the run's first step
			r = runCLI(t, "status", "status-ended", nats)
			return r.code == 0 && pending.MatchString(r.stdout)
		}, 20*time.Second, 10*time.Millisecond, "a live run's wait is pending: %s", r.stdout)

		r = runCLI(t, "cancel", "status-ended", nats)
		require.Equal(t, 0, r.code, r.stderr)
		r = runCLI(t, "start", "reminder", "--input", `{"after":"1h"}`, "--id", "status-ended", "--wait", nats)
		require.Equal(t, 1, r.code, "waits for the cancellation: %s", r.stderr)
		r = runCLI(t, "status", "status-ended", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "Status      cancelled")
		require.Regexp(t, `wait  never fired \(due \d{4}-.*; the run ended at seq \d+\)`, r.stdout)
		require.NotContains(t, r.stdout, "pending")
	})

	t.Run("ADamagedRunIsShownAndTerminated", func(t *testing.T) {
		r := runCLI(t, "start", "reminder", "--input", `{"after":"1h"}`, "--id", "damaged-cli", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Eventually(t, func() bool {
			r = runCLI(t, "status", "damaged-cli", nats)
			return r.code == 0 && strings.Contains(r.stdout, "Status      suspended")
		}, 20*time.Second, 10*time.Millisecond, "the run sleeps")
		events := regexp.MustCompile(`Events      (\d+)`).FindStringSubmatch(r.stdout)[1]
		// A message published by hand on the run's history subject.
		nc, err := natsgo.Connect(strings.TrimPrefix(nats, "--nats-url="))
		require.NoError(t, err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), "flow.history.damaged-cli", []byte(`{"not":"a commit"}`))
		require.NoError(t, err)

		listed := regexp.MustCompile(`damaged-cli\s+reminder\s+DAMAGED\s+.*\(was suspended\)`)
		require.Eventually(t, func() bool {
			r = runCLI(t, "runs", nats)
			return r.code == 0 && listed.MatchString(r.stdout)
		}, 20*time.Second, 10*time.Millisecond, "flow runs lists the run as damaged")
		r = runCLI(t, "status", "damaged-cli", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "Status      suspended")
		require.Contains(t, r.stdout, "Damaged     stream FLOW_HISTORY: decoding stream message")
		require.Contains(t, r.stdout, "the history is valid through seq "+events+", shown above; quarantined")
		require.Contains(t, r.stdout, "flow terminate damaged-cli")

		r = runCLI(t, "terminate", "damaged-cli", nats)
		require.Equal(t, 0, r.code, r.stderr)
		require.Eventually(t, func() bool {
			r = runCLI(t, "status", "damaged-cli", nats)
			return r.code == 0 && strings.Contains(r.stdout, "Status      failed") && !strings.Contains(r.stdout, "Damaged")
		}, 20*time.Second, 10*time.Millisecond, "the run ended and is released")
	})
}

// TestEnumeratedFlagsAreUsageErrors checks flags before any connection is made: the NATS URL
// points nowhere, so a flag that passes the check fails later with exit code 1 instead.
func TestEnumeratedFlagsAreUsageErrors(t *testing.T) {
	t.Parallel()
	nowhere := "--nats-url=nats://127.0.0.1:1"
	valid := "pending, running, suspended, cancelling, blocked, completed, failed, cancelled, continued_as_new, queued, paused"
	for _, tt := range []failure{
		{"BogusStatus", []string{"runs", "--status", "bogus"}, 2, `flow: --status "bogus" is not a run status; use one or several of ` + valid + ", comma-separated"},
		{"OneBogusAmongValid", []string{"runs", "--status", "completed,finished"}, 2, `--status "finished" is not a run status`},
		{"EmptyMember", []string{"runs", "--status", "completed,"}, 2, `--status "" is not a run status`},
		{"StatusIsCaseSensitive", []string{"runs", "--status", "Completed"}, 2, `--status "Completed" is not a run status`},
		{"ZeroLimit", []string{"runs", "--limit", "0"}, 2, "flow: --limit must be from 1 to 1000 runs per page, got 0"},
		{"LimitTooLarge", []string{"runs", "--limit", "1001"}, 2, "got 1001"},
		{"BadSince", []string{"runs", "--since", "soon"}, 2, "--since must be an RFC 3339 time"},
		{"ValidStatusesPass", []string{"runs", "--status", "completed, failed,continued_as_new"}, 1, "NATS unreachable"},
		{"ValidLimitPasses", []string{"runs", "--limit", "1000"}, 1, "NATS unreachable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, append(tt.args, nowhere)...)
			requireFails(t, r.code, r.stderr, tt.code, tt.want)
			require.Empty(t, r.stdout)
		})
	}
	r := runCLI(t, "runs", "--help")
	require.Contains(t, r.stdout, valid, "the help names the statuses")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	t.Run("FlagAndCommandAgree", func(t *testing.T) {
		flag := runCLI(t, "--version")
		require.Equal(t, 0, flag.code, flag.stderr)
		require.Regexp(t, `^flow \S+.*\n$`, flag.stdout)
		cmd := runCLI(t, "version")
		require.Equal(t, 0, cmd.code, cmd.stderr)
		require.Equal(t, flag.stdout, cmd.stdout)
		require.Equal(t, currentBuild().String()+"\n", cmd.stdout)
	})
	vcs := []debug.BuildSetting{
		{Key: "-compiler", Value: "gc"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T10:31:02Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	for _, tt := range []struct {
		name      string
		ldVersion string
		bi        *debug.BuildInfo
		want      buildInfo
		line      string
	}{
		{"NoBuildInfo", "", nil, buildInfo{Version: "(devel)"}, "flow (devel)"},
		{"LinkerVersionWins", "v1.2.3", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.0.0"}},
			buildInfo{Version: "v1.2.3", GoVersion: "go1.26.0"}, "flow v1.2.3 (go1.26.0)"},
		{"ModuleVersion", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.0.0"}},
			buildInfo{Version: "v1.0.0", GoVersion: "go1.26.0"}, "flow v1.0.0 (go1.26.0)"},
		{"WorkTreeBuild", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			buildInfo{Version: "(devel)", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-01T10:31:02Z", Modified: true, GoVersion: "go1.26.0"},
			"flow (devel) (commit 0123456789ab, 2026-12-01T10:31:02Z, modified; go1.26.0)"},
		{"CleanTree", "v2.0.0", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs[:4]},
			buildInfo{Version: "v2.0.0", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-01T10:31:02Z"},
			"flow v2.0.0 (commit 0123456789ab, 2026-12-01T10:31:02Z)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := readBuildInfo(tt.ldVersion, tt.bi)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.line, got.String())
		})
	}
}

func TestTruncateCutsAtRunes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"Short", "abc", 5, "abc"},
		{"Exact", "abcde", 5, "abcde"},
		{"Long", "abcdef", 5, "abcd…"},
		{"ChineseFits", "张伟李娜", 4, "张伟李娜"},
		{"Chinese", "张伟李娜王芳", 4, "张伟李…"},
		{"ChineseLongerInBytesThanN", "张伟李娜", 10, "张伟李娜"},
		{"Mixed", `{"who":"张伟"}`, 10, `{"who":"张…`},
		{"Emoji", "🙂🙂🙂", 2, "🙂…"},
		{"One", "abc", 1, "…"},
		{"Empty", "", 3, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := truncate(tt.in, tt.n)
			require.Equal(t, tt.want, got)
			require.True(t, utf8.ValidString(got))
			require.LessOrEqual(t, utf8.RuneCountInString(got), tt.n)
		})
	}
}

// TestPrintSnapshotOfEndedRun checks that a run that ended lists nothing as pending, whatever
// it had not got: a timer, a signal, a hook delivery or a child's end.
func TestPrintSnapshotOfEndedRun(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	snapshot := func(outcome *flow.RunOutcome) *flow.Snapshot {
		s := &flow.Snapshot{RunID: "r1", Steps: map[string]*flow.RunStep{}, Signals: []*flow.RunSignal{}}
		s.Spec = event.Spec{Definition: "d"}
		s.Waits = map[string]*flow.RunWait{"nap": {ID: "nap", Deadline: due, Seq: 3},
			"early": {ID: "early", Deadline: due, Seq: 2, Fired: true, FiredSeq: 4}}
		s.SignalWaits = map[string]*flow.RunSignalWait{"approval": {ID: "approval", Name: "approve", Seq: 5, Signal: -1}}
		s.Hooks = map[string]*flow.RunHook{"callback": {ID: "callback", Token: "tok", Seq: 6}}
		s.Children = map[string]*flow.RunChild{"kid": {ID: "kid", RunID: "r1-kid", BatchSeq: 7}}
		s.Status, s.Outcome = core.StatusSuspended, outcome
		if outcome != nil {
			s.Status = core.StatusCancelled
		}
		return s
	}
	for _, tt := range []struct {
		name    string
		outcome *flow.RunOutcome
		want    []string
		notWant []string
	}{
		{"Active", nil, []string{
			"  early  fired at seq 4\n  nap  pending until 2026-12-01T11:00:00Z\n",
			"Signal wait approval (approve): waiting\n",
			"Hook callback: token tok waiting\n",
			"Child kid: run r1-kid running\n",
		}, nil},
		{"Ended", &flow.RunOutcome{Outcome: event.OutcomeCancelled, Reason: "stop", Seq: 9}, []string{
			"  early  fired at seq 4\n  nap  never fired (due 2026-12-01T11:00:00Z; the run ended at seq 9)\n",
			"Signal wait approval (approve): never received (the run ended)\n",
			"Hook callback: token tok never received (the run ended)\n",
			"Child kid: run r1-kid not settled when this run ended (see `flow status r1-kid`)\n",
		}, []string{"pending", "waiting", "running"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			printSnapshot(&out, snapshot(tt.outcome))
			for _, w := range tt.want {
				require.Contains(t, out.String(), w)
			}
			for _, w := range tt.notWant {
				require.NotContains(t, out.String(), w)
			}
		})
	}
}

// eventLineRE matches an event line of text output; its group is the event type.
var eventLineRE = regexp.MustCompile(`^ *\d+  \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} UTC  (\S+) `)

// eventTimeRE matches the time text output shows for an event.
var eventTimeRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} UTC$`)

func TestEventTimeHasDateAndZone(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CET", 3600)
	got := time.Date(2026, 12, 1, 11, 31, 2, 123456789, paris).UTC().Format(eventTime)
	require.Equal(t, "2026-12-01 10:31:02.123 UTC", got)
	require.Regexp(t, eventTimeRE, got)
}
