package core_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// generator produces random valid histories by driving the core itself: every event comes from
// a decision validated by core.Decide or from an input accepted by the core's functions, so the
// histories are exactly those the engine can write.
type generator struct {
	rng  *rand.Rand
	run  string
	s    *core.Snapshot
	envs []event.Envelope
	now  time.Time
	ids  int
}

func newGenerator(seed uint64, run string) *generator {
	return &generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), run: run, s: core.New(run), now: epoch}
}

func (g *generator) id(prefix string) string {
	g.ids++
	return fmt.Sprintf("%s%d", prefix, g.ids)
}

func (g *generator) commit(ps []event.Payload) error {
	g.now = g.now.Add(time.Duration(g.rng.IntN(5000)) * time.Millisecond)
	for _, p := range ps {
		e := event.Envelope{RunID: g.run, Seq: g.s.Seq + 1, Time: g.now, Payload: p}
		if err := g.s.Apply(e); err != nil {
			return err
		}
		g.envs = append(g.envs, e)
	}
	return nil
}

func (g *generator) policy() event.RetryPolicy {
	p := event.RetryPolicy{MaxAttempts: 1 + g.rng.IntN(3), InitialInterval: time.Duration(1+g.rng.IntN(3)) * time.Second}
	switch g.rng.IntN(6) {
	case 0, 1:
		p.OnExhaustion = event.ExhaustionReturnError
	case 2:
		p.OnExhaustion = event.ExhaustionPauseRun
	}
	if g.rng.IntN(4) == 0 {
		p.NonRetryable = []string{"fatal"}
	}
	return p
}

// decision returns a random decision of workflow code for the current snapshot.
func (g *generator) decision(allowEnd bool) core.Decision {
	s := g.s
	n := 7
	if allowEnd {
		n = 11
	}
	switch g.rng.IntN(n) {
	case 0, 1:
		steps := make([]core.StepCall, 1+g.rng.IntN(3))
		for i := range steps {
			steps[i] = core.StepCall{ID: g.id("step"), Name: "work", Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, g.rng.IntN(100))), Retry: g.policy()}
		}
		return core.ScheduleSteps{Steps: steps}
	case 2:
		if g.rng.IntN(2) == 0 {
			return core.Sleep{ID: g.id("sleep"), Duration: time.Duration(1+g.rng.IntN(60)) * time.Second}
		}
		return core.WaitUntil{ID: g.id("until"), Deadline: g.now.Add(time.Duration(g.rng.IntN(600)) * time.Second)}
	case 3:
		if g.rng.IntN(3) == 0 {
			return core.RecordSideEffect{ID: g.id("effect"), Value: json.RawMessage(fmt.Sprintf(`{"v":%d}`, g.rng.IntN(100)))}
		}
		return core.AwaitSignal{WaitID: g.id("sig"), Name: []string{"approve", "poke"}[g.rng.IntN(2)]}
	case 4:
		if g.rng.IntN(3) == 0 {
			return core.UpsertAttributes{ID: g.id("upsert"), Attributes: event.Attributes{
				"amount": {Type: event.AttrInt, Value: json.RawMessage(fmt.Sprint(g.rng.IntN(100)))}}}
		}
		return core.CreateHook{ID: g.id("hook"), Metadata: json.RawMessage(`{"who":"ops"}`)}
	case 5:
		kids := make([]core.ChildCall, 1+g.rng.IntN(2))
		for i := range kids {
			kids[i] = core.ChildCall{ID: g.id("child"), Definition: "sub", Input: json.RawMessage(`{}`)}
			if g.rng.IntN(2) == 0 {
				kids[i].Retry = &event.RetryPolicy{MaxAttempts: 1 + g.rng.IntN(3), NonRetryable: []string{"fatal"}}
			}
		}
		return core.StartChildren{Children: kids}
	case 6:
		// Cancel a step or a child (a settled one is refused), or re-issue something already
		// recorded: a pending one waits, a settled one is refused.
		policy := []event.Cancellation{event.CancelTry, event.CancelWait, event.CancelAbandon}[g.rng.IntN(3)]
		switch g.rng.IntN(3) {
		case 0:
			for id := range s.Steps {
				return core.CancelStep{ID: id, Policy: policy}
			}
		case 1:
			for id := range s.Children {
				return core.CancelChild{ID: id, Policy: policy}
			}
		}
		for id, st := range s.Steps {
			return core.ScheduleSteps{Steps: []core.StepCall{{ID: id, Name: st.Name, Input: st.Input, Retry: st.Retry}}}
		}
		return core.Sleep{ID: g.id("sleep"), Duration: time.Second}
	case 7:
		return core.Complete{Output: json.RawMessage(`{"ok":true}`)}
	case 8:
		return core.Fail{Error: event.ErrorInfo{Kind: "business", Message: "rejected"}}
	case 9:
		return core.Cancel{Reason: "done with it"}
	default:
		return core.ContinueAsNew{Input: json.RawMessage(`{"cursor":1}`)}
	}
}

// step performs one random action that the engine could perform next.
func (g *generator) step(allowEnd bool) error {
	s := g.s
	type action func() ([]event.Payload, error)
	var actions []action
	actions = append(actions, func() ([]event.Payload, error) {
		dec := g.decision(allowEnd)
		if open := s.OpenUpdates(); len(open) > 0 && g.rng.IntN(2) == 0 {
			dec = core.CompleteUpdate{ID: open[0].ID, Result: json.RawMessage(`{"n":1}`)}
		}
		judge := func(*core.Snapshot, *core.Update, bool) core.UpdateDecision {
			switch g.rng.IntN(3) {
			case 0:
				return core.UpdateDecision{Reject: &event.ErrorInfo{Kind: "invalid", Message: "no"}}
			case 1:
				return core.UpdateDecision{Complete: true, Result: json.RawMessage(`2`)}
			}
			return core.UpdateDecision{}
		}
		v, err := core.Decide(s, updating{script{id: core.Identity{Attributes: []event.AttributeDecl{{Name: "amount", Type: event.AttrInt}}},
			fn: func(*core.Snapshot) core.Decision { return dec }}, judge}, core.DecideOptions{})
		if err != nil {
			return []event.Payload{core.DecisionFailure(err, "")}, nil
		}
		return v.Events, nil
	})
	for _, a := range core.Attempts(s) {
		actions = append(actions, func() ([]event.Payload, error) {
			out := core.StepOutcome{Output: json.RawMessage(`"done"`)}
			switch g.rng.IntN(4) {
			case 0:
				out = core.StepOutcome{Err: &event.ErrorInfo{Kind: "flaky", Message: "try again"}}
			case 1:
				out = core.StepOutcome{Err: &event.ErrorInfo{Kind: "fatal", Message: "broken"}}
			}
			return core.StepResult(s, a.StepID, a.Attempt, out, g.now)
		})
	}
	for _, t := range core.Timers(s) {
		actions = append(actions, func() ([]event.Payload, error) { return core.Fire(s, t) })
	}
	actions = append(actions, func() ([]event.Payload, error) {
		return core.ReceiveSignal(s, []string{"approve", "poke"}[g.rng.IntN(2)], json.RawMessage(`{"v":1}`), g.id("delivery"))
	})
	if g.rng.IntN(3) == 0 {
		actions = append(actions, func() ([]event.Payload, error) {
			return core.ReceiveUpdate(s, g.id("update"), "add", json.RawMessage(`{"v":1}`))
		})
	}
	for id, h := range s.Hooks {
		if !h.Received {
			actions = append(actions, func() ([]event.Payload, error) {
				return core.ReceiveHook(s, id, json.RawMessage(`{"approved":true}`), g.id("delivery"))
			})
		}
	}
	for id, c := range s.Children {
		if !c.Settled && !c.Retrying() {
			actions = append(actions, func() ([]event.Payload, error) {
				o := &core.Outcome{Outcome: event.OutcomeCompleted, Output: json.RawMessage(`7`), Time: g.now}
				switch g.rng.IntN(3) {
				case 0:
					o = &core.Outcome{Outcome: event.OutcomeFailed, Error: &event.ErrorInfo{Kind: "flaky", Message: "child failed"}, Time: g.now}
				case 1:
					o = &core.Outcome{Outcome: event.OutcomeFailed, Error: &event.ErrorInfo{Kind: "fatal", Message: "child broke"}, Time: g.now}
				}
				ended := &core.Snapshot{RunID: c.CurrentRunID(), Parent: &event.ParentRef{RunID: s.RunID, ChildID: id, Attempt: c.Attempt}, Outcome: o}
				return core.SettleChild(s, id, ended)
			})
		}
	}
	if s.Delayed {
		actions = append(actions, func() ([]event.Payload, error) {
			return core.Debounce(s, json.RawMessage(`{"latest":true}`), s.NotBefore.Add(time.Second), "")
		})
	}
	if s.Queued() {
		actions = append(actions, func() ([]event.Payload, error) { return core.Admit(s, g.now) })
	}
	if s.Paused == nil && g.rng.IntN(12) == 0 {
		actions = append(actions, func() ([]event.Payload, error) { return core.PauseRun(s, "hold", "ops", g.id("pause")) })
	}
	if s.Paused != nil {
		actions = append(actions, func() ([]event.Payload, error) { return core.UnpauseRun(s, "go", "ops", g.id("unpause"), g.now) })
	}
	if !s.CancelRequested && g.rng.IntN(10) == 0 {
		actions = append(actions, func() ([]event.Payload, error) { return core.RequestCancel(s, "please stop") })
	}
	ps, err := actions[g.rng.IntN(len(actions))]()
	if err != nil {
		return nil // an input the core refuses appends nothing
	}
	return g.commit(ps)
}

// generate returns a random valid history of about n events.
func generate(t testing.TB, seed uint64, n int) []event.Envelope {
	t.Helper()
	g := newGenerator(seed, fmt.Sprintf("prop-%d", seed))
	started := &event.RunStarted{Spec: event.Spec{Definition: "prop"}, Input: json.RawMessage(`{}`), Seed: "s"}
	if seed%4 == 0 {
		started.NotBefore = epoch.Add(time.Minute) // a delayed start, debounced at random below
	}
	if seed%3 == 0 {
		// Under flow control: queued until run.admitted.
		started.Priority = int(seed % 5)
		started.Control = &event.FlowControl{Group: "prop", Key: "k", KeyConcurrency: 2, Rate: 10, RatePeriod: event.Duration(time.Second)}
	}
	require.NoError(t, g.commit([]event.Payload{started}))
	for len(g.envs) < n && !g.s.Terminal() {
		require.NoError(t, g.step(len(g.envs) > n/2), "seed %d", seed)
	}
	if seed%5 == 1 {
		// A reset of the run, ended or active (then run.reset ends it): run.reset follows.
		plan := &core.ResetPlan{Point: 1, Record: &event.RunReset{Seq: 1, Mode: event.ResetToSeq},
			Started: &event.RunStarted{ResetFrom: &event.ResetFrom{RunID: g.s.RunID, Seq: 1, Mode: event.ResetToSeq, CopiedTo: g.s.Seq, SeedRunID: g.s.RunID}}}
		ps, err := core.RecordReset(g.s, g.s.RunID+"=_reset-1", plan)
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, g.commit(ps), "seed %d", seed)
	}
	if seed%7 == 3 && g.s.Terminal() {
		// Retention deleted the ended run: run.deleted follows, last.
		require.NoError(t, g.commit([]event.Payload{&event.RunDeleted{Reason: "retention 1h passed", Msgs: uint64(len(g.envs))}}), "seed %d", seed)
	}
	if seed%7 == 2 {
		// An operator accepted damage found after the history's end (or after its last commit
		// so far): run.damage_accepted may follow anything.
		accepted := &event.RunDamageAccepted{Reason: "a foreign write", By: "resume --accept-damage", After: 9, Through: 12}
		require.NoError(t, g.commit([]event.Payload{accepted}), "seed %d", seed)
	}
	return g.envs
}

const propertyRuns = 300

// eachCut calls check for each of propertyRuns generated histories of about 10 to 90 events,
// cut after an event drawn at random (from the PCG stream (seed, salt)), with the projection of
// the events up to the cut.
func eachCut(t *testing.T, salt uint64, check func(seed uint64, hist []event.Envelope, cut int, prefix *core.Snapshot)) {
	t.Helper()
	for seed := range uint64(propertyRuns) {
		hist := generate(t, seed, 10+int(seed%80))
		cut := 1 + rand.New(rand.NewPCG(seed, salt)).IntN(len(hist))
		prefix, err := core.Project(hist[0].RunID, hist[:cut])
		require.NoError(t, err, "seed %d", seed)
		check(seed, hist, cut, prefix)
	}
}

func TestPropertyIncrementalProjection(t *testing.T) {
	t.Parallel()
	eachCut(t, 7, func(seed uint64, hist []event.Envelope, cut int, part *core.Snapshot) {
		whole, err := core.Project(hist[0].RunID, hist)
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, part.ApplyAll(hist[cut:]))
		require.True(t, reflect.DeepEqual(whole, part), "seed %d: projecting 1..%d then %d..%d differs from projecting 1..%d", seed, cut, cut+1, len(hist), len(hist))

		// Event by event from an empty snapshot gives the same again.
		one := core.New(hist[0].RunID)
		for _, e := range hist {
			require.NoError(t, one.Apply(e))
		}
		require.True(t, reflect.DeepEqual(whole, one), "seed %d", seed)
	})
}

func TestPropertyGeneratedHistoriesAreValid(t *testing.T) {
	t.Parallel()
	types := map[event.Type]int{}
	for seed := range uint64(propertyRuns) {
		hist := generate(t, seed, 60)
		for _, e := range hist {
			types[e.Type()]++
		}
		require.Empty(t, core.Check(hist[0].RunID, hist), "seed %d", seed)

		// Encoding and decoding the history changes nothing.
		b, err := json.Marshal(hist)
		require.NoError(t, err)
		var back []event.Envelope
		require.NoError(t, json.Unmarshal(b, &back), "seed %d", seed)
		a, err := core.Project(hist[0].RunID, hist)
		require.NoError(t, err)
		c, err := core.Project(hist[0].RunID, back)
		require.NoError(t, err)
		ja, _ := json.Marshal(a)
		jc, _ := json.Marshal(c)
		require.JSONEq(t, string(ja), string(jc), "seed %d", seed)
	}
	for _, typ := range event.Types() {
		require.Positive(t, types[typ], "the generator never produced %s", typ)
	}
}

// TestPropertyCheckerFindsCorruption: every corruption of a valid history is reported.
func TestPropertyCheckerFindsCorruption(t *testing.T) {
	t.Parallel()
	corruptions := []struct {
		name string
		fn   func(rng *rand.Rand, h []event.Envelope) []event.Envelope
	}{
		{"DropEvent", func(rng *rand.Rand, h []event.Envelope) []event.Envelope {
			i := 1 + rng.IntN(len(h)-2)
			return slices.Delete(slices.Clone(h), i, i+1)
		}},
		{"DuplicateEvent", func(rng *rand.Rand, h []event.Envelope) []event.Envelope {
			i := 1 + rng.IntN(len(h)-1)
			return slices.Insert(slices.Clone(h), i, h[i])
		}},
		{"RestartRun", func(rng *rand.Rand, h []event.Envelope) []event.Envelope {
			c := slices.Clone(h)
			i := 1 + rng.IntN(len(h)-1)
			c[i] = event.Envelope{RunID: c[i].RunID, Seq: c[i].Seq, Time: c[i].Time, Payload: h[0].Payload}
			return c
		}},
		{"ForeignRun", func(rng *rand.Rand, h []event.Envelope) []event.Envelope {
			c := slices.Clone(h)
			i := rng.IntN(len(h))
			c[i].RunID = "someone-else"
			return c
		}},
		{"EventAfterEnd", func(_ *rand.Rand, h []event.Envelope) []event.Envelope {
			last := h[len(h)-1]
			end := event.Envelope{RunID: last.RunID, Seq: last.Seq + 1, Time: last.Time, Payload: &event.RunCancelled{Reason: "x", Cause: event.CauseOperator}}
			extra := event.Envelope{RunID: last.RunID, Seq: last.Seq + 2, Time: last.Time, Payload: &event.RunCancelRequested{}}
			c := slices.Clone(h)
			if !last.Type().Terminal() {
				c = append(c, end)
				extra.Seq = end.Seq + 1
			}
			return append(c, extra)
		}},
	}
	for _, cc := range corruptions {
		t.Run(cc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(100) {
				hist := generate(t, seed, 30)
				if len(hist) < 4 {
					continue
				}
				bad := cc.fn(rand.New(rand.NewPCG(seed, 3)), hist)
				require.NotEmpty(t, core.Check(hist[0].RunID, bad), "seed %d: corruption not found", seed)
			}
		})
	}
}
