package core_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of golden tests in testdata/")

// TestGolden reads each testdata/*.txt: a history, one event per line as "<type> <data JSON>"
// (optionally prefixed by "+<duration>" to advance the recorded time, which otherwise advances
// one second per event), then "decide <decision JSON>" lines. After "----" follows the expected
// output: the invariant violations, the projected snapshot, and the verdict of each decision.
// Run with -rewrite to regenerate the expected output after an intended change.
func TestGolden(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			input, want, found := strings.Cut(string(raw), "\n----\n")
			if !found {
				input = strings.TrimSuffix(string(raw), "\n----\n")
			}
			got := runGolden(t, input)
			if *rewrite {
				require.NoError(t, os.WriteFile(file, []byte(input+"\n----\n"+got), 0o644))
				return
			}
			require.True(t, found, "%s has no ---- separator; run go test -rewrite", file)
			require.Equal(t, want, got, "%s: output differs; if the change is intended, run go test ./internal/core -run TestGolden -rewrite", file)
		})
	}
}

func runGolden(t *testing.T, input string) string {
	t.Helper()
	var out bytes.Buffer
	run := "golden"
	now := epoch
	var hist []event.Envelope
	var decides []string
	for n, line := range strings.Split(input, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "run "):
			run = strings.TrimPrefix(line, "run ")
			continue
		case strings.HasPrefix(line, "decide "):
			decides = append(decides, strings.TrimPrefix(line, "decide "))
			continue
		}
		if strings.HasPrefix(line, "+") {
			d, rest, _ := strings.Cut(line[1:], " ")
			dur, err := time.ParseDuration(d)
			require.NoError(t, err, "line %d", n+1)
			now, line = now.Add(dur), rest
		}
		typ, data, _ := strings.Cut(line, " ")
		p := event.New(event.Type(typ))
		if p == nil {
			_, err := event.DecodePayload(event.Type(typ), []byte(data))
			fmt.Fprintf(&out, "line %d: %v\n", n+1, err)
			continue
		}
		require.NoError(t, json.Unmarshal([]byte(data), p), "line %d", n+1)
		if s, ok := p.(*event.StepScheduled); ok {
			for i := range s.Steps {
				s.Steps[i].Retry = s.Steps[i].Retry.Normalize()
			}
		}
		hist = append(hist, event.Envelope{RunID: run, Seq: uint64(len(hist) + 1), Time: now, Payload: p})
		now = now.Add(time.Second)
	}

	vs := core.Check(run, hist)
	if len(vs) == 0 {
		out.WriteString("violations: none\n")
	}
	for _, v := range vs {
		fmt.Fprintf(&out, "violation: %s\n", v)
	}
	s, err := core.Project(run, hist)
	if err != nil {
		fmt.Fprintf(&out, "project: %v\n", err)
		return out.String()
	}
	snap, err := json.MarshalIndent(s, "", "  ")
	require.NoError(t, err)
	fmt.Fprintf(&out, "snapshot:\n%s\n", snap)
	for _, d := range decides {
		fmt.Fprintf(&out, "decide %s\n", d)
		v, err := goldenDecide(t, s, d)
		switch {
		case err != nil:
			fmt.Fprintf(&out, "  error: %v\n", err)
		case v.Waiting():
			fmt.Fprintf(&out, "  waiting on %s\n", v.WaitingOn)
		default:
			for _, e := range v.Events {
				b, err := json.Marshal(e)
				require.NoError(t, err)
				fmt.Fprintf(&out, "  append %s %s\n", e.EventType(), b)
			}
		}
	}
	return out.String()
}

// goldenDecide runs core.Decide with workflow code that returns the decision encoded in d, or,
// for "auto", code that must not be asked.
func goldenDecide(t *testing.T, s *core.Snapshot, d string) (core.Verdict, error) {
	var dec core.Decision
	if d != "auto" {
		dec = parseDecision(t, d)
	}
	code := core.Identity{BuildID: s.Spec.BuildID, Patches: s.Spec.Patches}
	return core.Decide(s, script{id: code, fn: func(*core.Snapshot) core.Decision {
		if d == "auto" {
			t.Errorf("decide auto: the workflow code was asked, but the core should have decided alone")
		}
		return dec
	}}, core.DecideOptions{})
}

func parseDecision(t *testing.T, d string) core.Decision {
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(d), &m), "decision %s", d)
	require.Len(t, m, 1, "a decision has one key: %s", d)
	for k, v := range m {
		decode := func(into any) { require.NoError(t, json.Unmarshal(v, into), "decision %s", d) }
		switch k {
		case "schedule_steps":
			var steps []struct {
				ID    string            `json:"id"`
				Name  string            `json:"name"`
				Input json.RawMessage   `json:"input"`
				Retry event.RetryPolicy `json:"retry"`
			}
			decode(&steps)
			var calls []core.StepCall
			for _, s := range steps {
				calls = append(calls, core.StepCall{ID: s.ID, Name: s.Name, Input: s.Input, Retry: s.Retry})
			}
			return core.ScheduleSteps{Steps: calls}
		case "sleep":
			var w struct {
				ID       string         `json:"id"`
				Duration event.Duration `json:"duration"`
			}
			decode(&w)
			return core.Sleep{ID: w.ID, Duration: time.Duration(w.Duration)}
		case "wait_until":
			var w struct {
				ID       string    `json:"id"`
				Deadline time.Time `json:"deadline"`
			}
			decode(&w)
			return core.WaitUntil{ID: w.ID, Deadline: w.Deadline}
		case "await_signal":
			var w struct{ WaitID, Name string }
			decode(&w)
			return core.AwaitSignal{WaitID: w.WaitID, Name: w.Name}
		case "create_hook":
			var h struct {
				ID       string          `json:"id"`
				Token    string          `json:"token"`
				Metadata json.RawMessage `json:"metadata"`
			}
			decode(&h)
			return core.CreateHook{ID: h.ID, Token: h.Token, Metadata: h.Metadata}
		case "start_children":
			var cs []struct {
				ID           string             `json:"id"`
				Definition   string             `json:"definition"`
				Input        json.RawMessage    `json:"input"`
				CancelPolicy event.CancelPolicy `json:"cancel_policy"`
				Retry        *event.RetryPolicy `json:"retry"`
			}
			decode(&cs)
			var calls []core.ChildCall
			for _, c := range cs {
				calls = append(calls, core.ChildCall{ID: c.ID, Definition: c.Definition, Input: c.Input, CancelPolicy: c.CancelPolicy, Retry: c.Retry})
			}
			return core.StartChildren{Children: calls}
		case "cancel_step", "cancel_child":
			var c struct {
				ID     string             `json:"id"`
				Policy event.Cancellation `json:"policy"`
			}
			decode(&c)
			if k == "cancel_child" {
				return core.CancelChild{ID: c.ID, Policy: c.Policy}
			}
			return core.CancelStep{ID: c.ID, Policy: c.Policy}
		case "complete":
			return core.Complete{Output: v}
		case "fail":
			var e event.ErrorInfo
			decode(&e)
			return core.Fail{Error: e}
		case "cancel":
			var reason string
			decode(&reason)
			return core.Cancel{Reason: reason}
		case "continue_as_new":
			return core.ContinueAsNew{Input: v}
		case "side_effect":
			var se struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			}
			decode(&se)
			return core.RecordSideEffect{ID: se.ID, Value: se.Value}
		}
		t.Fatalf("unknown decision %q", k)
	}
	return nil
}
