package flow

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/flowrun/flow/internal/core"
)

// Random returns a random number generator whose stream is a pure function of the run and of
// how many times this evaluation of the workflow function called Random before: the n-th call
// in an evaluation returns a generator seeded from the run's recorded seed, its run ID and n.
// Each evaluation of the code (every decision, every replay) draws the same numbers in the same
// order, so a value drawn from it can go into a decision (a step's input, a wait's deadline).
//
// Flow asks the workflow function for one decision at a time, calling it again from the top
// for each one. The n-th call is stable as long as the calls before it are made on every
// evaluation: call Random unconditionally, before branches that depend on history that can
// change (a signal that may or may not have arrived). A value that must be chosen once and
// kept whatever the code does next belongs in [Context.SideEffect] or a step's output.
//
// The generator is math/rand/v2's ChaCha8: good statistics, not a secret (anyone who reads the
// run's history can derive it).
func (c *Context) Random() *rand.Rand {
	n := c.randoms
	c.randoms++
	return rand.New(rand.NewChaCha8(core.DeterministicSeed(c.s.Seed, c.s.SeedRunID(), "random", n)))
}

// UUID returns a version 4 (random) UUID, in its canonical 36-character form, derived like
// [Context.Random]: the n-th call of an evaluation returns the same UUID on every evaluation
// and every replay of the run. UUIDs of different runs differ (they are derived from each run's
// recorded 128-bit seed), and within a run each call gives a new one.
func (c *Context) UUID() string {
	n := c.uuids
	c.uuids++
	b := core.DeterministicSeed(c.s.Seed, c.s.SeedRunID(), "uuid", n)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return string(out[:])
}

// SideEffect returns the value of side effect id: the JSON the run's history recorded for it,
// and a nil decision. If the history records no value for id yet, it calls fn once, encodes
// what fn returns to JSON and returns the decision that records it (event
// side_effect.recorded); return that decision, and the next evaluation reads the value back:
//
//	raw, d := ctx.SideEffect("order-number", func() any { return newOrderNumber() })
//	if d != nil {
//		return d, nil
//	}
//
// fn runs in the worker as the decision is made, before it is recorded: if the worker dies
// before the commit, another worker calls fn again, so fn is for values (an ID, the time, a
// configuration read), not for effects on other systems, which belong in steps. Once recorded,
// the value never changes: a later evaluation, a replay, or code whose fn now returns something
// else all read the recorded value, and fn is not called again. id shares the run's namespace
// of decision IDs (steps, waits, hooks, children): using one for two kinds is a
// non-determinism error. While a query evaluates the code, fn is not called, and the decision
// returned is discarded. See [SideEffectValue] for a typed form.
func (c *Context) SideEffect(id string, fn func() any) (json.RawMessage, Decision) {
	if se, ok := c.s.SideEffects[id]; ok {
		return c.resolved(se.Value), nil
	}
	if v, ok := c.s.ReplayedSideEffect(id); ok {
		// Replay checks the history's own decision: read the value it recorded, do not run fn.
		return nil, core.RecordSideEffect{ID: id, Value: v}
	}
	if c.query != nil {
		return nil, core.RecordSideEffect{ID: id, Value: json.RawMessage("null")}
	}
	if fn == nil {
		return nil, core.Invalid{What: fmt.Sprintf("side effect %q", id), Err: fmt.Errorf("SideEffect needs a function")}
	}
	v, err := encode(fn())
	if err != nil {
		return nil, core.Invalid{What: fmt.Sprintf("value of side effect %q", id), Err: err}
	}
	return nil, core.RecordSideEffect{ID: id, Value: v}
}

// SideEffectValue is [Context.SideEffect] with the value decoded into T: it returns the
// recorded value and a nil decision, or, the first time, the decision that records fn's value.
// A recorded value that does not decode into T is returned as err.
//
//	number, d, err := flow.SideEffectValue(ctx, "order-number", newOrderNumber)
//	if d != nil || err != nil {
//		return d, err
//	}
func SideEffectValue[T any](ctx *Context, id string, fn func() T) (v T, d Decision, err error) {
	var wrapped func() any
	if fn != nil {
		wrapped = func() any { return fn() }
	}
	raw, d := ctx.SideEffect(id, wrapped)
	if d != nil {
		return v, d, nil
	}
	v, _, err = decodeAs[T](raw, "value of side effect", id)
	return v, nil, err
}
