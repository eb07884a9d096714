package engine_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/sdk"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// policyBundle is a test bundle whose code has an "echo" workflow (completes with its input),
// a "held" one (waits for signal "go", then completes with its payload) and a "broken" one
// (fails), on a virtual clock and an in-memory start key index.
type policyBundle struct {
	*testBundle
	clock *testClock
	keys  *engine.MemoryKeys
	f     *fault.Injector
	e     *engine.Engine
}

func policySetup(t *testing.T) *policyBundle {
	t.Helper()
	b := setup(t, func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "echo", func(ctx *flow.Context, in json.RawMessage) (flow.Decision, error) {
			return ctx.Complete(in), nil
		})
		flow.RegisterWorkflow(reg, "held", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
			if p := ctx.Signal("go"); p != nil {
				return ctx.Complete(p), nil
			}
			return ctx.AwaitSignal("go", "go"), nil
		})
		flow.RegisterWorkflow(reg, "broken", func(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
			return ctx.Fail(fmt.Errorf("broken on purpose")), nil
		})
	})
	pb := &policyBundle{testBundle: b, clock: newTestClock(t0), f: &fault.Injector{}}
	pb.keys = &engine.MemoryKeys{Now: pb.clock.Now}
	e, err := engine.New(engine.Config{Store: b.store, Runtime: sdk.RuntimeOf(b.reg), Host: b.host, Replayer: sdk.RuntimeOf(b.reg).Replaying(),
		Clock: pb.clock, Keys: pb.keys, Faults: pb.f})
	require.NoError(t, err)
	pb.e = e
	return pb
}

// params returns the start of definition def with input in under run ID id.
func (b *policyBundle) params(t *testing.T, def, id, in string) engine.StartParams {
	t.Helper()
	spec, err := sdk.RuntimeOf(b.reg).Spec(def, []byte(in))
	require.NoError(t, err)
	return engine.StartParams{RunID: id, Spec: spec, Input: []byte(in)}
}

// drive drives run runID until it ends or waits, and returns its status.
func (b *policyBundle) drive(t *testing.T, runID string) core.Status {
	t.Helper()
	res, err := b.e.Drive(t.Context(), runID, 0)
	require.NoError(t, err)
	return res.Status
}

func (b *policyBundle) snapshot(t *testing.T, runID string) *core.Snapshot {
	t.Helper()
	s, err := b.e.Snapshot(t.Context(), runID)
	require.NoError(t, err)
	return s
}

// started returns the run.started of run runID.
func (b *policyBundle) started(t *testing.T, runID string) *event.RunStarted {
	t.Helper()
	return b.history(t, runID)[0].Payload.(*event.RunStarted)
}

// An active run's ID under each conflict policy.
func TestStartConflictPolicies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		policy  event.ConflictPolicy
		input   string
		wantID  string
		created bool
		err     error
	}{
		{"default, the same start", "", `1`, "order", false, nil},
		{"default, another input", "", `2`, "", false, engine.ErrRunExists},
		{"fail, the same start", event.ConflictFail, `1`, "order", false, nil},
		{"fail, another input", event.ConflictFail, `2`, "", false, engine.ErrRunExists},
		{"use existing, another input", event.ConflictUseExisting, `2`, "order", false, nil},
		{"use existing, the same start", event.ConflictUseExisting, `1`, "order", false, nil},
		{"terminate existing", event.ConflictTerminateExisting, `2`, "order=_1", true, nil},
		{"terminate existing, the same input", event.ConflictTerminateExisting, `1`, "order=_1", true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := policySetup(t)
			_, _, err := b.e.Start(t.Context(), b.params(t, "held", "order", `1`))
			require.NoError(t, err)
			require.Equal(t, core.StatusSuspended, b.drive(t, "order"))

			p := b.params(t, "held", "order", c.input)
			p.OnConflict = c.policy
			id, created, err := b.e.Start(t.Context(), p)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				require.Len(t, b.history(t, "order"), 2, "a refused start appends nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.wantID, id)
			require.Equal(t, c.created, created)
			if c.policy != event.ConflictTerminateExisting {
				require.False(t, b.snapshot(t, "order").Terminal(), "the existing run goes on")
				return
			}
			old := b.snapshot(t, "order")
			require.Equal(t, core.StatusFailed, old.Status, "the existing run is terminated")
			require.Equal(t, event.CauseOperator, old.Outcome.Cause)
			require.Contains(t, old.Outcome.Error.Message, `replaced by run "order=_1"`)
			sp := b.started(t, id).StartPolicy
			require.Equal(t, &event.StartPolicy{OnConflict: event.ConflictTerminateExisting, RunID: "order", Previous: "order", Replaces: true}, sp)

			// Inputs and reads addressed to the caller's ID reach the new run.
			require.Equal(t, core.StatusSuspended, b.drive(t, id))
			to, err := b.e.Signal(t.Context(), "order", "go", []byte(`"now"`), "d1")
			require.NoError(t, err)
			require.Equal(t, id, to)
			require.Equal(t, core.StatusCompleted, b.drive(t, id))
			latest, err := b.e.LatestRun(t.Context(), "order")
			require.NoError(t, err)
			require.Equal(t, id, latest)
		})
	}
}

// An ended run's ID under each reuse policy, for each way a run ends.
func TestStartReusePolicies(t *testing.T) {
	t.Parallel()
	ends := map[string]func(t *testing.T, b *policyBundle){
		"completed": func(t *testing.T, b *policyBundle) {
			_, err := b.e.Signal(t.Context(), "job", "go", []byte(`"ok"`), "d1")
			require.NoError(t, err)
			require.Equal(t, core.StatusCompleted, b.drive(t, "job"))
		},
		"terminated": func(t *testing.T, b *policyBundle) {
			_, err := b.e.Terminate(t.Context(), "job", "stop")
			require.NoError(t, err)
		},
		"cancelled": func(t *testing.T, b *policyBundle) {
			_, err := b.e.Cancel(t.Context(), "job", "stop")
			require.NoError(t, err)
			require.Equal(t, core.StatusCancelled, b.drive(t, "job"))
		},
	}
	for _, c := range []struct {
		end    string
		policy event.ReusePolicy
		reused bool
	}{
		{"completed", "", false},
		{"completed", event.ReuseRefuse, false},
		{"completed", event.ReuseAllow, true},
		{"completed", event.ReuseAllowFailedOnly, false},
		{"terminated", "", false},
		{"terminated", event.ReuseAllow, true},
		{"terminated", event.ReuseAllowFailedOnly, true},
		{"cancelled", event.ReuseRefuse, false},
		{"cancelled", event.ReuseAllowFailedOnly, true},
		{"cancelled", event.ReuseAllow, true},
	} {
		t.Run(fmt.Sprintf("%s/%s", c.end, c.policy), func(t *testing.T) {
			t.Parallel()
			b := policySetup(t)
			_, _, err := b.e.Start(t.Context(), b.params(t, "held", "job", `1`))
			require.NoError(t, err)
			require.Equal(t, core.StatusSuspended, b.drive(t, "job"))
			ends[c.end](t, b)
			outcome := b.snapshot(t, "job").Outcome.Outcome

			p := b.params(t, "held", "job", `2`)
			p.Reuse = c.policy
			id, created, err := b.e.Start(t.Context(), p)
			if !c.reused {
				require.ErrorIs(t, err, engine.ErrRunExists)
				require.False(t, created)
				// The same start as the ended run's is answered with it, as a retry.
				p.Input = []byte(`1`)
				id, created, err := b.e.Start(t.Context(), p)
				if c.policy == event.ReuseAllowFailedOnly {
					require.ErrorIs(t, err, engine.ErrRunExists, "allow_failed_only refuses a completed run's ID")
					return
				}
				require.NoError(t, err)
				require.Equal(t, "job", id)
				require.False(t, created)
				return
			}
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, "job=_1", id)
			rs := b.started(t, id)
			require.Equal(t, &event.StartPolicy{Reuse: c.policy, RunID: "job", Previous: "job"}, rs.StartPolicy)
			require.JSONEq(t, `2`, string(rs.Input))
			require.Equal(t, outcome, b.snapshot(t, "job").Outcome.Outcome, "the ended run is left as it ended")

			// A signal to the caller's ID reaches the new run.
			require.Equal(t, core.StatusSuspended, b.drive(t, id))
			to, err := b.e.Signal(t.Context(), "job", "go", []byte(`"again"`), "d2")
			require.NoError(t, err)
			require.Equal(t, id, to)
			require.Equal(t, core.StatusCompleted, b.drive(t, id))

			// Reusing it again takes the next number, linked to the run before.
			p.Reuse = event.ReuseAllow
			id2, created, err := b.e.Start(t.Context(), p)
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, "job=_2", id2)
			require.Equal(t, "job=_1", b.started(t, id2).StartPolicy.Previous)
			latest, err := b.e.LatestRun(t.Context(), "job")
			require.NoError(t, err)
			require.Equal(t, id2, latest)
		})
	}
}

// The latest run of an ID is found however many runs reused it, through continuations, and
// the probes find it in about 2·log2(n) reads.
func TestLatestRunFollowsReusesAndContinuations(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	p := b.params(t, "echo", "batch", `0`)
	p.Reuse = event.ReuseAllow
	for i := range 13 {
		p.Input = []byte(strconv.Itoa(i))
		id, created, err := b.e.Start(t.Context(), p)
		require.NoError(t, err)
		require.True(t, created)
		if i > 0 {
			require.Equal(t, event.ReuseRunID("batch", i), id)
		}
		require.Equal(t, core.StatusCompleted, b.drive(t, id))
		latest, err := b.e.LatestRun(t.Context(), "batch")
		require.NoError(t, err)
		require.Equal(t, id, latest)
	}
	// An input to an ended ID whose last run ended is refused by that run.
	_, err := b.e.Signal(t.Context(), "batch", "go", []byte(`1`), "d1")
	require.ErrorIs(t, err, core.ErrTerminal)
}

// A retry of a policy start (the same request ID) is answered with the run it started, instead
// of replacing that run or reusing the ID once more.
func TestStartPolicyRetryIsAnsweredWithItsRun(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	_, _, err := b.e.Start(t.Context(), b.params(t, "held", "sub", `1`))
	require.NoError(t, err)
	p := b.params(t, "held", "sub", `2`)
	p.OnConflict, p.Reuse, p.RequestID = event.ConflictTerminateExisting, event.ReuseAllow, "req-1"
	for i := range 3 {
		id, created, err := b.e.Start(t.Context(), p)
		require.NoError(t, err)
		require.Equal(t, "sub=_1", id)
		require.Equal(t, i == 0, created, "attempt %d", i)
	}
	p.RequestID = "req-2"
	id, created, err := b.e.Start(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, "sub=_2", id, "another request replaces the run again")
	require.True(t, created)
	require.Equal(t, core.StatusFailed, b.snapshot(t, "sub=_1").Status)
}

// terminate_existing appends the new run first, then terminates the old one. A crash between
// the two is repaired by whoever applies the new run's start (the history service): the old
// run is terminated, once, however often the commit is applied.
func TestTerminateExistingCrashIsRepaired(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	_, _, err := b.e.Start(t.Context(), b.params(t, "held", "sync", `1`))
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, "sync"))

	b.f.Arm(fault.AfterStartBeforeReplace, fault.Fail, 0, 1)
	p := b.params(t, "held", "sync", `2`)
	p.OnConflict = event.ConflictTerminateExisting
	id, created, err := b.e.Start(t.Context(), p)
	require.NoError(t, err, "the start is committed")
	require.True(t, created)
	require.Equal(t, 1, b.f.Hits(fault.AfterStartBeforeReplace))
	require.False(t, b.snapshot(t, "sync").Terminal(), "the crash left the old run active")

	s := b.snapshot(t, id)
	hist := b.history(t, id)
	for range 2 {
		require.NoError(t, b.e.ApplyCommit(t.Context(), s, hist[:1]))
	}
	old := b.history(t, "sync")
	require.Equal(t, event.TypeRunFailed, old[len(old)-1].Type(), "the repair terminated the old run")
	n := 0
	for _, e := range old {
		if e.Type().Terminal() {
			n++
		}
	}
	require.Equal(t, 1, n)
}

// A delayed start makes no decision until the scheduler fires its start timer; then it runs.
func TestStartDelay(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	p := b.params(t, "echo", "later", `"hello"`)
	p.Delay = time.Minute
	id, created, err := b.e.Start(t.Context(), p)
	require.NoError(t, err)
	require.True(t, created)
	rs := b.started(t, id)
	require.Equal(t, t0.Add(time.Minute), rs.NotBefore)
	require.Equal(t, &event.StartPolicy{Delay: event.Duration(time.Minute)}, rs.StartPolicy)
	require.Empty(t, b.host.resumed, "a delayed run gets no resume task")

	require.Equal(t, core.StatusSuspended, b.drive(t, id), "no decision before the delay fires")
	s := b.snapshot(t, id)
	require.True(t, s.Delayed)
	require.Len(t, b.history(t, id), 1)
	timers := core.Timers(s)
	require.Equal(t, []core.Timer{{RunID: id, Kind: core.TimerStart, ID: "1", Due: t0.Add(time.Minute), Seq: 1}}, timers)
	require.Zero(t, b.host.timerCount(), "the starter registers no timer: the history service, its one writer, does from the commit")
	c := core.Derive(s, b.history(t, id))
	require.False(t, c.Resume, "the history service sends no task either")
	require.Equal(t, timers, c.Timers)

	// A signal before the delay fires is kept, and answers nothing yet.
	_, err = b.e.Signal(t.Context(), id, "poke", []byte(`1`), "d1")
	require.NoError(t, err)
	require.Equal(t, core.StatusSuspended, b.drive(t, id))

	b.clock.Advance(time.Minute)
	require.NoError(t, b.e.Fire(t.Context(), timers[0]))
	require.NoError(t, b.e.Fire(t.Context(), timers[0]), "a second firing is moot")
	require.Equal(t, core.StatusCompleted, b.drive(t, id))
	hist := b.history(t, id)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeSignalReceived, event.TypeRunDelayFired, event.TypeRunCompleted}, typesOf(hist))
	require.JSONEq(t, `"hello"`, string(b.snapshot(t, id).Outcome.Output))
}

// A delayed start's timer follows from its commit: whoever applies the commit (the history
// service, the timer index's one writer) registers it; the starter writes none.
func TestStartDelayTimerFollowsTheCommit(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	p := b.params(t, "echo", "later", `1`)
	p.Delay = time.Second
	id, created, err := b.e.Start(t.Context(), p)
	require.NoError(t, err)
	require.True(t, created)
	require.Zero(t, b.host.timerCount())
	require.NoError(t, b.e.ApplyCommit(t.Context(), b.snapshot(t, id), b.history(t, id)))
	require.Equal(t, 1, b.host.timerCount(), "registered from the commit")
}

// Cancelling a delayed run ends it at once, as cancelled, and frees its debounce key.
func TestDelayedRunCancelled(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	p := b.params(t, "echo", "pending", `1`)
	p.Debounce = &engine.Debounce{Key: "k", Period: time.Hour}
	id, _, err := b.e.Start(t.Context(), p)
	require.NoError(t, err)
	_, err = b.e.Cancel(t.Context(), id, "changed my mind")
	require.NoError(t, err)
	require.Equal(t, core.StatusCancelled, b.drive(t, id))
	hist := b.history(t, id)
	require.Equal(t, []event.Type{event.TypeRunStarted, event.TypeRunCancelRequested, event.TypeRunCancelled}, typesOf(hist))
	require.NoError(t, b.e.ApplyCommit(t.Context(), b.snapshot(t, id), hist[2:]))
	require.Zero(t, b.keys.Len(), "the key is released")
	require.Zero(t, b.host.timerCount(), "the start timer is moot")
}

// A dedup key returns the first run to every start within its window, whatever run ID they
// ask for, and a new run after it.
func TestStartDedup(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	start := func(id, in string) (string, bool) {
		t.Helper()
		p := b.params(t, "echo", id, in)
		p.DedupKey, p.DedupWindow = "invoice 42/paid", 10*time.Minute
		got, created, err := b.e.Start(t.Context(), p)
		require.NoError(t, err)
		return got, created
	}
	for _, c := range []struct {
		advance time.Duration
		id, in  string
		want    string
		created bool
	}{
		{0, "a", `1`, "a", true},
		{time.Minute, "b", `2`, "a", false},
		{8 * time.Minute, "", `3`, "a", false},
		{59 * time.Second, "c", `4`, "a", false},
		{time.Second, "d", `5`, "d", true}, // 10m after the first: its window ended
		{time.Minute, "e", `6`, "d", false},
	} {
		b.clock.Advance(c.advance)
		got, created := start(c.id, c.in)
		require.Equal(t, c.want, got, "start %s", c.id)
		require.Equal(t, c.created, created, "start %s", c.id)
	}
	for _, id := range []string{"a", "b", "c", "e"} {
		if id != "a" {
			ok, err := b.e.Existing(t.Context(), b.params(t, "echo", id, `1`))
			require.NoError(t, err)
			require.False(t, ok, "no run %s was started", id)
		}
	}
	require.Equal(t, &event.StartPolicy{DedupKey: "invoice 42/paid", DedupWindow: event.Duration(10 * time.Minute)}, b.started(t, "a").StartPolicy)
}

// A crash between claiming a dedup key and appending run.started loses nothing and starts one
// run: the next start of the key starts the run the key names.
func TestStartDedupCrashBetweenKeyAndStart(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	b.f.Arm(fault.AfterKeyBeforeStart, fault.Fail, 0, 1)
	p := b.params(t, "echo", "first", `1`)
	p.DedupKey, p.DedupWindow = "k", time.Hour
	_, _, err := b.e.Start(t.Context(), p)
	require.ErrorIs(t, err, fault.ErrInjected)
	require.Equal(t, 1, b.keys.Len(), "the key is claimed")

	p2 := b.params(t, "echo", "second", `2`)
	p2.DedupKey, p2.DedupWindow = "k", time.Hour
	id, created, err := b.e.Start(t.Context(), p2)
	require.NoError(t, err)
	require.Equal(t, "first", id, "the run the key names")
	require.True(t, created, "started by the second start")
	require.JSONEq(t, `2`, string(b.started(t, "first").Input))

	id, created, err = b.e.Start(t.Context(), p) // the first caller's retry
	require.NoError(t, err)
	require.Equal(t, "first", id)
	require.False(t, created)
	ok, err := b.e.Existing(t.Context(), b.params(t, "echo", "second", `2`))
	require.NoError(t, err)
	require.False(t, ok, "one run only")
}

// Debounce collapses N starts within the quiet period into one run, started once after the
// period with the latest input; the next start after it fired starts a new run.
func TestStartDebounce(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	start := func(id, in string) (string, bool) {
		t.Helper()
		p := b.params(t, "echo", id, in)
		p.Debounce = &engine.Debounce{Key: "user-7", Period: 30 * time.Second}
		got, created, err := b.e.Start(t.Context(), p)
		require.NoError(t, err)
		return got, created
	}
	const n = 6
	var timers []core.Timer
	for i := range n {
		id, created := start(fmt.Sprintf("save-%d", i), strconv.Itoa(i))
		require.Equal(t, "save-0", id, "start %d collapses into the pending run", i)
		require.Equal(t, i == 0, created)
		s := b.snapshot(t, id)
		require.True(t, s.Delayed)
		require.Equal(t, b.clock.Now().Add(30*time.Second), s.NotBefore, "the quiet period restarts")
		timers = append(timers, core.Timers(s)...)
		require.Equal(t, core.StatusSuspended, b.drive(t, id))
		b.clock.Advance(10 * time.Second)
	}
	require.Zero(t, b.host.timerCount(), "the starter registers no timer")
	s := b.snapshot(t, "save-0")
	require.Equal(t, n-1, s.Debounced)
	c := core.Derive(s, b.history(t, "save-0"))
	require.Equal(t, timers[n-1:], c.Timers, "the history service registers the latest start timer only")
	var moot []string
	for _, tm := range c.Moot {
		moot = append(moot, tm.Key())
	}
	require.Len(t, moot, n-1, "and deletes each start timer a run.debounced replaced: %v", moot)

	// The earlier timers are moot: firing them appends nothing.
	b.clock.Advance(time.Minute)
	for _, tm := range timers[:n-1] {
		require.NoError(t, b.e.Fire(t.Context(), tm))
	}
	require.True(t, b.snapshot(t, "save-0").Delayed)
	require.NoError(t, b.e.Fire(t.Context(), timers[n-1]))
	require.Equal(t, core.StatusCompleted, b.drive(t, "save-0"))
	require.JSONEq(t, strconv.Itoa(n-1), string(b.snapshot(t, "save-0").Outcome.Output), "the latest input")
	hist := b.history(t, "save-0")
	require.Len(t, hist, 1+(n-1)+2)

	// The history service releases the key when the delay fires.
	require.NoError(t, b.e.ApplyCommit(t.Context(), b.snapshot(t, "save-0"), hist[n:n+1]))
	require.Zero(t, b.keys.Len())
	id, created := start("save-9", `9`)
	require.Equal(t, "save-9", id, "after the run fired, the key starts a new run")
	require.True(t, created)
}

// A debounce key left behind (its release lost) names a run past its delay: the next start
// replaces it with a new run. A crash between claiming the key and the start is repaired by
// the next start, which starts the named run with its own input.
func TestStartDebounceRepairs(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	deb := func(id, in string) engine.StartParams {
		p := b.params(t, "echo", id, in)
		p.Debounce = &engine.Debounce{Key: "k", Period: time.Second}
		return p
	}
	_, _, err := b.e.Start(t.Context(), deb("one", `1`))
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	require.NoError(t, b.e.Fire(t.Context(), core.Timers(b.snapshot(t, "one"))[0]))
	require.Equal(t, core.StatusCompleted, b.drive(t, "one"))
	require.Equal(t, 1, b.keys.Len(), "the release was never applied")

	b.f.Arm(fault.AfterKeyBeforeStart, fault.Fail, 0, 1)
	_, _, err = b.e.Start(t.Context(), deb("two", `2`))
	require.ErrorIs(t, err, fault.ErrInjected, "the key now names run two, which has no history")
	id, created, err := b.e.Start(t.Context(), deb("three", `3`))
	require.NoError(t, err)
	require.Equal(t, "two", id)
	require.True(t, created)
	require.JSONEq(t, `3`, string(b.started(t, "two").Input))
	id, created, err = b.e.Start(t.Context(), deb("four", `4`))
	require.NoError(t, err)
	require.Equal(t, "two", id)
	require.False(t, created)
	require.JSONEq(t, `4`, string(b.snapshot(t, "two").Input))
}

// Bad policies are refused with an error that says what to do, and nothing is appended.
func TestStartPolicyValidation(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	noKeys, err := engine.New(engine.Config{Store: b.store, Host: b.host})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		e    *engine.Engine
		mod  func(p *engine.StartParams)
		want string
	}{
		{"unknown conflict policy", b.e, func(p *engine.StartParams) { p.OnConflict = "replace" }, "not one of fail, use_existing, terminate_existing"},
		{"unknown reuse policy", b.e, func(p *engine.StartParams) { p.Reuse = "sometimes" }, "not one of refuse, allow, allow_failed_only"},
		{"negative delay", b.e, func(p *engine.StartParams) { p.Delay = -time.Second }, "negative"},
		{"key without window", b.e, func(p *engine.StartParams) { p.DedupKey = "k" }, "positive dedup window"},
		{"window without key", b.e, func(p *engine.StartParams) { p.DedupWindow = time.Second }, "needs a dedup key"},
		{"debounce without period", b.e, func(p *engine.StartParams) { p.Debounce = &engine.Debounce{Key: "k"} }, "positive quiet period"},
		{"debounce without key", b.e, func(p *engine.StartParams) { p.Debounce = &engine.Debounce{Period: time.Second} }, "needs a key"},
		{"debounce and delay", b.e, func(p *engine.StartParams) {
			p.Debounce, p.Delay = &engine.Debounce{Key: "k", Period: time.Second}, time.Second
		}, "drop the start delay"},
		{"debounce and dedup", b.e, func(p *engine.StartParams) {
			p.Debounce, p.DedupKey, p.DedupWindow = &engine.Debounce{Key: "k", Period: time.Second}, "k", time.Second
		}, "not both"},
		{"no key index", noKeys, func(p *engine.StartParams) { p.DedupKey, p.DedupWindow = "k", time.Second }, "no start key index"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := b.params(t, "echo", "v", `1`)
			c.mod(&p)
			_, _, err := c.e.Start(t.Context(), p)
			require.ErrorContains(t, err, c.want)
			ok, err := b.e.Existing(t.Context(), b.params(t, "echo", "v", `1`))
			require.NoError(t, err)
			require.False(t, ok)
		})
	}
}
