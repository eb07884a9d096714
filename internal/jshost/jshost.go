// Package jshost is the engine's host on JetStream: timers go to the FLOW_TIMERS bucket for the
// scheduler, hook tokens to the create-only FLOW_HOOKS bucket, and resume tasks to the
// FLOW_TASKS work queue (deduplicated by the task's key, "<run>:<seq>"). The history service is
// the one writer of both buckets (docs/derived-state.md); other processes use the host for
// tasks and lookups, and a worker claims hook tokens from the history service instead
// (services/worker).
package jshost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/extensions"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/timerindex"
)

// Host implements engine.Host. It is safe for concurrent use.
type Host struct {
	js     jetstream.JetStream
	timers *timerindex.Index
	hooks  *HookRoutes
	source types.URIRef
	logger *slog.Logger
	// Faults fails timer writes and task publishes at fault.TimerPut and fault.TaskPublish, for
	// tests. Nil in production; set it before use.
	Faults *fault.Injector
	// AsyncTasks makes Resume publish without waiting for the stream's acknowledgement, for a
	// writer whose tasks are a fast path only (the scheduler's: the history service derives
	// the same task from the commit): Resume then fails only if the task cannot be sent. Set
	// it before use.
	AsyncTasks bool
	// Offers makes ResumeOffered offer new runs to live workers (eager start, api.EagerPrefix):
	// the ingress's. Without it ResumeOffered is Resume. Set it before use.
	Offers bool
}

// offerWait bounds the wait for a worker's answer to an offer: one that takes it answers from
// its subscription's callback, at once.
const offerWait = 20 * time.Millisecond

// OfferTaken is the answer of a worker that took an offered run (api.EagerPrefix); any other
// answer declines it.
const OfferTaken = "taken"

var _ engine.Host = (*Host)(nil)

// New opens the buckets on js. Flow's streams must exist. source is the ce-source of the tasks
// it publishes; logger may be nil.
func New(ctx context.Context, js jetstream.JetStream, source string, logger *slog.Logger) (*Host, error) {
	if logger == nil {
		logger = slog.Default()
	}
	h := &Host{js: js, source: cloudevent.Source(source), logger: logger}
	var err error
	if h.timers, err = timerindex.Open(ctx, js); err != nil {
		return nil, err
	}
	if h.hooks, err = OpenHookRoutes(ctx, js); err != nil {
		return nil, err
	}
	return h, nil
}

// ScheduleTimers implements engine.Host: one entry per timer, overwritten with the same value on
// repair.
func (h *Host) ScheduleTimers(ctx context.Context, ts []core.Timer) error {
	for _, t := range ts {
		if err := h.Faults.Hit(fault.TimerPut); err != nil {
			return err
		}
		if err := h.timers.Put(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// DeleteTimers implements engine.Host: an entry that exists is deleted at its revision, so that
// nothing is written for entries the scheduler already removed.
func (h *Host) DeleteTimers(ctx context.Context, ts []core.Timer) error {
	for _, t := range ts {
		if err := h.timers.DeleteTimer(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// RegisterHook implements engine.Host with one entry per token, created only if the token is
// free or released.
func (h *Host) RegisterHook(ctx context.Context, token, runID, hookID string) error {
	want := HookRoute{RunID: runID, HookID: hookID}
	for {
		_, err := h.hooks.Create(ctx, token, want)
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		got, rev, err := h.lookup(ctx, token)
		if errors.Is(err, core.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		switch {
		case got.RunID == runID && got.HookID == hookID:
			return nil
		case got.RunID == "" || got.HookID == "":
			// Not a route Flow wrote: JSON another writer put there, such as the answer of
			// JetStream to a request whose reply subject named the key (docs/operations.md,
			// "What the permissions cannot stop"). Taken over, as a released one.
		case !got.Released:
			return &engine.TokenTakenError{RunID: got.RunID, HookID: got.HookID}
		}
		if _, err = h.hooks.Update(ctx, token, want, rev); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err // taken over, or a failure; a revision mismatch looks again
		}
	}
}

// ReleaseHook implements engine.Host: the entry that routes token to this hook is marked
// released, at its revision, so that a token another run took since is left alone.
func (h *Host) ReleaseHook(ctx context.Context, token, runID, hookID string) error {
	r, rev, err := h.lookup(ctx, token)
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.RunID != runID || r.HookID != hookID || r.Released {
		return nil
	}
	r.Released = true
	_, err = h.hooks.Update(ctx, token, r, rev)
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("releasing hook token: %w", err)
	}
	return nil
}

// LookupHook implements engine.Host.
func (h *Host) LookupHook(ctx context.Context, token string) (string, string, error) {
	r, _, err := h.lookup(ctx, token)
	return r.RunID, r.HookID, err
}

func (h *Host) lookup(ctx context.Context, token string) (HookRoute, uint64, error) {
	e, found, err := h.hooks.Get(ctx, token)
	if err != nil && !errors.Is(err, jetstream.ErrInvalidKey) {
		return HookRoute{}, 0, fmt.Errorf("looking up a hook token: %w", err)
	}
	if !found {
		return HookRoute{}, 0, fmt.Errorf("%w: no hook has this token", core.ErrNotFound)
	}
	return e.Value, e.Revision, e.Err
}

// TaskType is the ce-type of resume tasks.
const TaskType = "dev.flow.task.resume"

// Resume implements engine.Host: it publishes a resume task, a CloudEvent whose ID, the task's
// key "<run>:<seq>", is also its Nats-Msg-Id, so tasks for the same input collapse into one. Its
// CloudEvents traceparent extension (ce-traceparent) carries the run's trace context,
// t.TraceParent, or else the span ctx carries, if any.
func (h *Host) Resume(ctx context.Context, t engine.Task) error {
	msg, err := h.taskMsg(ctx, t)
	if err != nil {
		return err
	}
	if h.AsyncTasks {
		if _, err := h.js.PublishMsgAsync(msg, jetstream.WithMsgID(t.Key())); err != nil {
			return fmt.Errorf("publishing the resume task of run %q: %w", t.RunID, err)
		}
		return nil
	}
	if _, err := h.js.PublishMsg(ctx, msg, jetstream.WithMsgID(t.Key())); err != nil {
		return fmt.Errorf("publishing the resume task of run %q: %w", t.RunID, err)
	}
	return nil
}

// ResumeOffered implements engine.Offerer. With Offers set it offers t, a new run's first
// task, to a live worker of the run's queue and build, and publishes t only if none took it:
// a worker that takes an offer publishes the run's task itself, marked Offered, before it
// commits anything to the run (ResumeAsync, Task.Backing). An offer unanswered in time may have
// been taken: t is then published marked Offered too.
func (h *Host) ResumeOffered(ctx context.Context, t engine.Task) error {
	if !h.Offers {
		return h.Resume(ctx, t)
	}
	if err := h.Faults.Hit(fault.TaskOffer); err != nil {
		return h.Resume(ctx, t)
	}
	t.Offered = true
	msg, err := h.taskMsg(ctx, t)
	if err != nil {
		return err
	}
	msg.Subject = api.EagerOfferSubject(t.Queue, t.Build)
	octx, cancel := context.WithTimeout(ctx, offerWait)
	reply, err := h.js.Conn().RequestMsgWithContext(octx, msg)
	cancel()
	switch {
	case err == nil && string(reply.Data) == OfferTaken:
		return nil
	case err == nil || errors.Is(err, nats.ErrNoResponders):
		t.Offered = false // declined, or no worker takes offers
	}
	return h.Resume(ctx, t)
}

// asyncAckWait bounds the wait for the acknowledgement of a task ResumeAsync published: a
// connection that closes meanwhile never delivers it.
const asyncAckWait = 5 * time.Second

// ResumeAsync publishes task t as Resume does without waiting: backed waits for the stream's
// acknowledgement, at most asyncAckWait or until ctx ends, once, and returns the publish's
// outcome (the same on every call): fresh is false when the stream held a copy of the task
// already (the same key), err the publish's error.
func (h *Host) ResumeAsync(ctx context.Context, t engine.Task) (backed func() (fresh bool, err error), err error) {
	msg, err := h.taskMsg(ctx, t)
	if err != nil {
		return nil, err
	}
	ack, err := h.js.PublishMsgAsync(msg, jetstream.WithMsgID(t.Key()))
	if err != nil {
		return nil, fmt.Errorf("publishing the resume task of run %q: %w", t.RunID, err)
	}
	return sync.OnceValues(func() (bool, error) {
		timeout := time.NewTimer(asyncAckWait)
		defer timeout.Stop()
		select {
		case pa := <-ack.Ok():
			return !pa.Duplicate, nil
		case err := <-ack.Err():
			return false, fmt.Errorf("publishing the resume task of run %q: %w", t.RunID, err)
		case <-ctx.Done():
			return false, fmt.Errorf("publishing the resume task of run %q: %w", t.RunID, ctx.Err())
		case <-timeout.C:
			return false, fmt.Errorf("publishing the resume task of run %q: no acknowledgement in %s", t.RunID, asyncAckWait)
		}
	}), nil
}

// taskMsg returns the message of task t, a CloudEvent whose ID is the task's key.
func (h *Host) taskMsg(ctx context.Context, t engine.Task) (*nats.Msg, error) {
	if err := h.Faults.Hit(fault.TaskPublish); err != nil {
		return nil, err
	}
	body, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(streams.TaskSubject(t.Queue, t.Build, t.RunID))
	msg.Data = body
	ec := cloudevent.NewContext(h.source, TaskType)
	ec.ID, *ec.Subject, ec.Time.Time = t.Key(), t.RunID, time.Now().UTC()
	if t.TraceParent != "" {
		cloudevent.SetTraceParent(ec, extensions.DistributedTracingExtension{TraceParent: t.TraceParent})
	} else {
		cloudevent.SetTraceExtension(ctx, ec)
	}
	cloudevent.WriteHeaders(ec, msg.Header, make([]string, 0, 9))
	return msg, nil
}
