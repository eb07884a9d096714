package history_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// Foreign writes: messages published to a run's history subject by a role allowed to write
// there, not by Flow's store. Each one damages the run's history; the history service
// quarantines the run, flow status shows what is valid and why the rest is not, flow runs never
// lists it as healthy, and an operator releases it with flow resume --accept-damage (the run goes
// on from its longest valid prefix) or flow terminate (it ends there).

// forgedCommit is a history message with valid commit headers holding payloads as sequences
// seq, seq+1, ... of run runID, as a hand-made publish would write it.
func forgedCommit(t *testing.T, runID string, seq uint64, payloads ...event.Payload) *nats.Msg {
	t.Helper()
	envs := make([]event.Envelope, len(payloads))
	types := ""
	for i, p := range payloads {
		envs[i] = event.Envelope{RunID: runID, Seq: seq + uint64(i), Time: time.Now().UTC(), Payload: p}
		if i > 0 {
			types += ","
		}
		types += string(p.EventType())
	}
	body, err := event.MarshalEnvelopes(envs)
	require.NoError(t, err)
	h := nats.Header{}
	h.Set("ce-specversion", "1.0")
	h.Set("ce-id", runID+":"+strconv.FormatUint(seq, 10))
	h.Set("ce-source", "somebody")
	h.Set(jsstore.HeaderType, jsstore.CommitType)
	h.Set(jsstore.HeaderFirstSeq, strconv.FormatUint(seq, 10))
	h.Set(jsstore.HeaderCount, strconv.Itoa(len(envs)))
	h.Set(jsstore.HeaderTypes, types)
	return &nats.Msg{Subject: streams.Layout{}.Subject(runID), Header: h, Data: body}
}

// foreignWrite is a kind of foreign write: name, a run ID suffix, and the message given the
// run's last sequence.
type foreignWrite struct {
	name, id string
	msg      func(t *testing.T, runID string, last uint64) *nats.Msg
}

var foreignWrites = []foreignWrite{
	// Valid headers and sequence, but the event breaks an invariant (the hook was never created).
	{"invariant", "invariant", func(t *testing.T, runID string, last uint64) *nats.Msg {
		return forgedCommit(t, runID, last+1, &event.HookReceived{HookID: "nope", Payload: json.RawMessage(`1`), DeliveryID: "d-1"})
	}},
	// A valid event, but its sequence skips ahead.
	{"sequence skips", "gap", func(t *testing.T, runID string, last uint64) *nats.Msg {
		return forgedCommit(t, runID, last+5, &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d-1"})
	}},
	// A valid event, but its sequence repeats one the run already has.
	{"sequence repeats", "repeat", func(t *testing.T, runID string, last uint64) *nats.Msg {
		return forgedCommit(t, runID, 2, &event.SignalReceived{Name: "go", Payload: json.RawMessage(`1`), DeliveryID: "d-1"})
	}},
	// No commit headers at all.
	{"no commit headers", "noheaders", func(t *testing.T, runID string, last uint64) *nats.Msg {
		return &nats.Msg{Subject: streams.Layout{}.Subject(runID), Data: []byte(`{"hello":"world"}`)}
	}},
}

// damagedRun starts run runID of "await" (suspended on signal "go"), publishes the foreign
// write kind to its subject with a plain connection, and waits until the runs index shows it
// damaged. It returns the run's last valid sequence.
func damagedRun(t *testing.T, b *testBundle, js jetstream.JetStream, runID string, kind foreignWrite) uint64 {
	t.Helper()
	_, err := b.Client.Start(b.Ctx, "await", nil, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	var last uint64
	require.Eventually(t, func() bool {
		sum, ok := b.entry(t, runID)
		last = sum.Seq
		return ok && sum.Status == flow.StatusSuspended
	}, 30*time.Second, 10*time.Millisecond, "run %s waits for its signal", runID)
	_, err = js.PublishMsg(b.Ctx, kind.msg(t, runID, last))
	require.NoError(t, err)
	waitDamaged(t, b, runID)
	return last
}

// waitDamaged waits until the runs listing shows run runID damaged, and its entry says why.
func waitDamaged(t *testing.T, b *testBundle, runID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		page, err := b.Client.Runs(b.Ctx, &flow.RunsFilter{Limit: 1000})
		if err != nil {
			return false
		}
		for _, r := range page.Runs {
			if r.RunID == runID {
				return r.Damaged != ""
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "flow runs lists run %s as damaged", runID)
}

// requireQuarantined checks what a quarantined run shows: flow status describes its valid
// prefix, through seq last, with why; snapshots and inputs are refused as damaged.
func requireQuarantined(t *testing.T, b *testBundle, runID string, last uint64, status core.Status) {
	t.Helper()
	d, err := b.Client.Describe(b.Ctx, runID, 0)
	require.NoError(t, err, "flow status shows what can be read")
	require.NotNil(t, d.Damage, "flow status says the run is damaged")
	require.NotEmpty(t, d.Damage.Reason)
	require.True(t, d.Damage.Quarantined)
	require.Equal(t, last, d.Damage.ValidThrough)
	require.Equal(t, last, d.Snapshot.Seq)
	require.Equal(t, status, d.Snapshot.Status)
	// The index entry says what the valid prefix says, with the damage, even when the run's
	// commits and the foreign write were applied together.
	require.Eventually(t, func() bool {
		sum, _ := b.entry(t, runID)
		return sum.Damaged != "" && sum.Status == status && sum.Definition == d.Snapshot.Spec.Definition
	}, 30*time.Second, 10*time.Millisecond, "the index entry of run %s shows its valid prefix", runID)
	_, err = b.Client.Snapshot(b.Ctx, runID)
	require.ErrorIs(t, err, flow.ErrDamaged)
	_, err = b.Client.Signal(b.Ctx, runID, "go", 1, nil)
	require.ErrorIs(t, err, flow.ErrDamaged)
	damaged, err := b.JS.KeyValue(b.Ctx, streams.DamagedBucket)
	require.NoError(t, err)
	_, err = damaged.Get(b.Ctx, runID)
	require.NoError(t, err, "run %s is in %s", runID, streams.DamagedBucket)
}

// requireReleased waits until run runID is out of quarantine and its index entry equals a fresh
// projection of its history, which holds run.damage_accepted right after seq last.
func requireReleased(t *testing.T, b *testBundle, runID string, last uint64) {
	t.Helper()
	damaged, err := b.JS.KeyValue(b.Ctx, streams.DamagedBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := damaged.Get(b.Ctx, runID)
		sum, ok := b.entry(t, runID)
		return errors.Is(err, jetstream.ErrKeyNotFound) && ok && sum.Damaged == ""
	}, 30*time.Second, 10*time.Millisecond, "run %s is released", runID)
	hist, err := b.Client.History(b.Ctx, runID, 0)
	require.NoError(t, err)
	require.Empty(t, core.Check(runID, hist))
	require.Greater(t, uint64(len(hist)), last)
	require.Equal(t, event.TypeRunDamageAccepted, hist[last].Type(), "the release is recorded right after the valid prefix")
	var sum, want core.Summary
	require.Eventually(t, func() bool {
		sum, _ = b.entry(t, runID)
		want = b.projected(t, runID)
		want.Parked = sum.Parked // why no worker drives it is no part of its history
		return sum.Equal(want)
	}, 30*time.Second, 10*time.Millisecond, "the index entry of run %s follows its history", runID)
}

// Every kind of foreign write quarantines the run, and either release takes it out of
// quarantine from its longest valid prefix: flow resume --accept-damage lets the run go on (the
// signal it waits for completes it), flow terminate ends it.
func TestForeignWriteRelease(t *testing.T) {
	t.Parallel()
	for _, release := range []struct {
		name, prefix string // the subtest, and the run IDs' prefix
		// do releases run runID, damaged after seq last, and checks how it goes on.
		do func(t *testing.T, b *testBundle, runID string, last uint64)
	}{
		{"AcceptDamage", "accept-", func(t *testing.T, b *testBundle, runID string, last uint64) {
			res, err := b.Client.Resume(b.Ctx, runID, &flow.ResumeOptions{AcceptDamage: true})
			require.NoError(t, err)
			require.Equal(t, core.StatusSuspended, res.Status)
			require.Equal(t, last+1, res.Seq)
			requireReleased(t, b, runID, last)

			_, err = b.Client.Signal(b.Ctx, runID, "go", "on", nil)
			require.NoError(t, err)
			var out string
			require.NoError(t, b.Client.Result(b.Ctx, runID, &out))
			require.Equal(t, "on", out)
		}},
		{"Terminate", "terminate-", func(t *testing.T, b *testBundle, runID string, last uint64) {
			to, err := b.Client.Terminate(b.Ctx, runID, "the operator gave up on it")
			require.NoError(t, err)
			require.Equal(t, runID, to)
			requireReleased(t, b, runID, last)
			var re *flow.RunError
			require.ErrorAs(t, b.Client.Result(b.Ctx, runID, nil), &re)
			require.Equal(t, core.StatusFailed, re.Status)
			sum, _ := b.entry(t, runID)
			require.Equal(t, core.StatusFailed, sum.Status)
		}},
	} {
		t.Run(release.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			js := natstest.JetStream(t, b.Srv)
			for _, kind := range foreignWrites {
				t.Run(kind.name, func(t *testing.T) {
					runID := release.prefix + kind.id
					last := damagedRun(t, b, js, runID, kind)
					requireQuarantined(t, b, runID, last, core.StatusSuspended)
					release.do(t, b, runID, last)
				})
			}
		})
	}
}

// A foreign write after a run's end: the run is listed as damaged, not as completed, and either
// release leaves it as it ended.
func TestForeignWriteAfterTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	js := natstest.JetStream(t, b.Srv)
	for _, how := range []string{"accept", "terminate"} {
		t.Run(how, func(t *testing.T) {
			runID := "ended-" + how
			_, err := b.Client.Start(b.Ctx, "steps", 1, &flow.StartOptions{RunID: runID})
			require.NoError(t, err)
			require.NoError(t, b.Client.Result(b.Ctx, runID, nil))
			var last uint64
			require.Eventually(t, func() bool {
				sum, ok := b.entry(t, runID)
				last = sum.Seq
				return ok && sum.Status == flow.StatusCompleted
			}, 30*time.Second, 10*time.Millisecond)
			_, err = js.PublishMsg(b.Ctx, foreignWrites[0].msg(t, runID, last))
			require.NoError(t, err)
			waitDamaged(t, b, runID)
			d, err := b.Client.Describe(b.Ctx, runID, 0)
			require.NoError(t, err)
			require.NotNil(t, d.Damage)
			require.Equal(t, core.StatusCompleted, d.Snapshot.Status)

			if how == "accept" {
				res, err := b.Client.Resume(b.Ctx, runID, &flow.ResumeOptions{AcceptDamage: true})
				require.NoError(t, err)
				require.Equal(t, core.StatusCompleted, res.Status)
			} else {
				_, err := b.Client.Terminate(b.Ctx, runID, "")
				require.NoError(t, err)
			}
			requireReleased(t, b, runID, last)
			var out int
			require.NoError(t, b.Client.Result(b.Ctx, runID, &out), "the run ended as it had")
			require.Equal(t, 1, out)
		})
	}
}

// A foreign write that lands right after a run's first commit, before the history service
// applied either (they are applied together): the run is quarantined, not retried for ever.
func TestForeignWriteInTheFirstBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nc := natstest.Connect(t, b.Srv)
	js := natstest.JetStream(t, b.Srv)
	runID := ingresstest.Accepted(t, nc, "nobody-serves-this", "first-batch", nil, "")
	_, err := js.PublishMsg(b.Ctx, foreignWrites[0].msg(t, runID, 1))
	require.NoError(t, err)
	waitDamaged(t, b, runID)
	requireQuarantined(t, b, runID, 1, core.StatusPending)
	_, err = b.Client.Terminate(b.Ctx, runID, "")
	require.NoError(t, err)
	requireReleased(t, b, runID, 1)
}
