// Package schedstore reads the schedules of FLOW_SCHEDULES and changes them, answering with the
// schedule API's descriptions and errors (internal/api/schedule.go).
//
// Ownership: the scheduler's schedule runner is the bucket's one writer (docs/schedules.md).
// Only it calls Create, Update and Apply, from the door it serves while it leads; the ingress
// forwards its callers' changes there, and reads the bucket with Get and Describe. Every change
// is a compare-and-set of the entry it read, so that it never overwrites what the runner's rounds
// stored meanwhile: a change that lost reads the entry again and repeats.
package schedstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/internal/typedkv"
	"github.com/flowrun/flow/pkg/event"
)

// changeAttempts bounds the compare-and-set rounds of one change.
const changeAttempts = 16

// Store is FLOW_SCHEDULES. It is safe for concurrent use.
type Store struct {
	// b reads the schedules as stored, checked by Get; checked reads them checked (Decode).
	b       *typedkv.Bucket[schedule.Schedule]
	checked *typedkv.Bucket[Watched]
}

// Open opens FLOW_SCHEDULES, which streams.Ensure creates. Its entries are keyed by the
// schedules' names and hold each schedule.Schedule (spec and state) as JSON.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	b, err := typedkv.Open[schedule.Schedule](ctx, js, streams.SchedulesBucket)
	if err != nil {
		return nil, err
	}
	return &Store{b: b, checked: typedkv.View(b, typedkv.Codec[Watched]{Decode: decodeWatched})}, nil
}

// ErrNotFound is wrapped by Load when the schedule does not exist (or was deleted).
var ErrNotFound = errors.New("schedstore: no such schedule")

// ErrConflict is wrapped by Save when the entry changed since it was read.
var ErrConflict = errors.New("schedstore: the schedule changed since it was read")

// Load reads schedule name, its timing and the revision of its entry, for the schedule runner.
func (s *Store) Load(ctx context.Context, name string) (*schedule.Schedule, *schedule.Timing, uint64, error) {
	e, found, err := s.checked.Get(ctx, name)
	if err != nil {
		return nil, nil, 0, err
	}
	if !found {
		return nil, nil, 0, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return e.Value.Schedule, e.Value.Timing, e.Revision, e.Err
}

// Save stores sch, the state of schedule sch.Name a round computed, if its entry is still at
// revision rev, and returns the new revision, or an error wrapping ErrConflict.
func (s *Store) Save(ctx context.Context, sch *schedule.Schedule, rev uint64) (uint64, error) {
	rev, err := s.b.Update(ctx, sch.Name, *sch, rev)
	if typedkv.IsConflict(err) {
		return 0, fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return rev, err
}

// Names lists the names of every schedule, in no order.
func (s *Store) Names(ctx context.Context) ([]string, error) { return s.b.Keys(ctx) }

// Watched is a schedule as the watch delivers it: the schedule and its timing (Decode).
type Watched struct {
	Schedule *schedule.Schedule
	Timing   *schedule.Timing
}

// Entry is a FLOW_SCHEDULES entry as watched: its Key is its schedule's name; Deleted marks a
// deleted (or purged) schedule, Err an entry that does not decode or is invalid (Decode's
// error, Value zero).
type Entry = typedkv.Entry[Watched]

// Watcher follows FLOW_SCHEDULES (Store.Watch).
type Watcher = typedkv.Watcher[Watched]

// Watch watches every entry: the existing ones first, then nil, then every change, until
// Watcher.Stop or the end of ctx, which close its Updates.
func (s *Store) Watch(ctx context.Context) (*Watcher, error) { return s.checked.Watch(ctx) }

func decodeWatched(value []byte) (Watched, error) {
	sch, t, err := Decode(value)
	if err != nil {
		return Watched{}, err
	}
	return Watched{Schedule: sch, Timing: t}, nil
}

// Decode decodes the value of an entry and checks it: the schedule and its timing.
func Decode(value []byte) (*schedule.Schedule, *schedule.Timing, error) {
	var sch schedule.Schedule
	if err := json.Unmarshal(value, &sch); err != nil {
		return nil, nil, err
	}
	t, err := sch.Validate()
	if err != nil {
		return nil, nil, err
	}
	return &sch, t, nil
}

func trimFlow(err error) string { return strings.TrimPrefix(err.Error(), "flow: ") }

// Get reads schedule name and the revision of its entry.
func (s *Store) Get(ctx context.Context, name string) (*schedule.Schedule, uint64, *schedule.Timing, *api.IngressError) {
	if err := schedule.ValidateName(name); err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeInvalidName, Message: trimFlow(err)}
	}
	e, found, err := s.b.Get(ctx, name)
	if err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("reading schedule %q: %v; retry", name, err)}
	}
	if !found {
		return nil, 0, nil, &api.IngressError{Code: api.CodeScheduleNotFound, Message: fmt.Sprintf("schedule %q does not exist; list schedules with `flow schedule list`", name)}
	}
	if e.Err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeIngressInternal, Message: fmt.Sprintf("schedule %q is stored malformed: %v", name, e.Err)}
	}
	sch := e.Value
	t, err := sch.Validate()
	if err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeIngressInternal, Message: fmt.Sprintf("schedule %q is stored invalid: %v", name, err)}
	}
	return &sch, e.Revision, t, nil
}

// Describe returns sch's description with its next n actions (0: the default).
func Describe(sch *schedule.Schedule, t *schedule.Timing, now time.Time, n int) *api.ScheduleDescription {
	if n <= 0 {
		n = api.DefaultScheduleNext
	}
	n = min(n, api.MaxScheduleNext)
	return &api.ScheduleDescription{Schedule: *sch, Next: sch.NextActions(t, now, n)}
}

// Create stores new schedule sch (its spec, start and policies, which the caller checked) as
// created at now, paused with note if paused. A taken name is CodeScheduleExists.
func (s *Store) Create(ctx context.Context, sch schedule.Schedule, paused bool, note string, now time.Time) (*api.ScheduleDescription, *api.IngressError) {
	if err := schedule.ValidateName(sch.Name); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidName, Message: trimFlow(err)}
	}
	sch.State = schedule.State{Paused: paused, Note: note}
	created, t, err := schedule.New(sch, now)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(err)}
	}
	if _, err := s.b.Create(ctx, sch.Name, *created); err != nil {
		if errors.Is(err, typedkv.ErrEncode) {
			return nil, &api.IngressError{Code: api.CodeIngressInternal, Message: err.Error()}
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, &api.IngressError{Code: api.CodeScheduleExists, Message: fmt.Sprintf("schedule %q exists; change it with `flow schedule update`, or delete it first", sch.Name)}
		}
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("creating schedule %q: %v; retry", sch.Name, err)}
	}
	return Describe(created, t, now, 0), nil
}

// Update changes the spec, start and policies of schedule sch.Name to sch's, keeping its state;
// paused pauses it, with note, unless it is paused already.
func (s *Store) Update(ctx context.Context, sch schedule.Schedule, paused bool, note string, now time.Time) (*api.ScheduleDescription, *api.IngressError) {
	accepted := true // an update always writes
	d, e := s.change(ctx, sch.Name, func(cur *schedule.Schedule, _ *schedule.Timing) error {
		cur.Spec, cur.Definition, cur.Queue, cur.Input, cur.Overlap, cur.CatchupWindow = sch.Spec, sch.Definition, sch.Queue, sch.Input, sch.Overlap, sch.CatchupWindow
		if paused && !cur.State.Paused {
			cur.State.Paused, cur.State.Note = true, note
		}
		cur.State.UpdatedAt = now.UTC()
		_, err := cur.Validate()
		return err
	}, 0, &accepted)
	if d != nil {
		d.Accepted = false
	}
	return d, e
}

// Apply carries out operation op (delete, pause, unpause, trigger or backfill) of req on its
// schedule. A trigger or a backfill without a request ID gets one; a repeated one is answered
// without a write, Accepted false.
func (s *Store) Apply(ctx context.Context, op string, req api.ScheduleRequest, now time.Time) (*api.ScheduleDescription, *api.IngressError) {
	switch op {
	case api.ScheduleOpDelete:
		// A round that stores the schedule's state between the read and the deletion makes the
		// deletion lose its compare-and-set: read it again, as change does.
		for range changeAttempts {
			sch, rev, t, e := s.Get(ctx, req.Name)
			if e != nil {
				return nil, e
			}
			err := s.b.Delete(ctx, req.Name, rev)
			if typedkv.IsConflict(err) {
				continue
			}
			if err != nil {
				return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("deleting schedule %q: %v; retry", req.Name, err)}
			}
			return Describe(sch, t, now, 0), nil
		}
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("schedule %q kept changing under %d attempts to delete it; retry", req.Name, changeAttempts)}
	case api.ScheduleOpPause, api.ScheduleOpUnpause, api.ScheduleOpTrigger, api.ScheduleOpBackfill:
	default:
		return nil, &api.IngressError{Code: api.CodeRouteNotFound, Message: fmt.Sprintf("no schedule operation %q; the operations are create, update, describe, list, pause, unpause, trigger, backfill and delete", op)}
	}
	if (op == api.ScheduleOpTrigger || op == api.ScheduleOpBackfill) && req.RequestID == "" {
		req.RequestID = nuid.Next()
	}
	accepted := true
	var triggerRun string
	d, e := s.change(ctx, req.Name, func(sch *schedule.Schedule, t *schedule.Timing) error {
		var err error
		switch op {
		case api.ScheduleOpPause:
			err = sch.Pause(req.Note, now)
		case api.ScheduleOpUnpause:
			err = sch.Unpause(t, req.Note, now)
		case api.ScheduleOpTrigger:
			accepted, err = sch.Trigger(req.RequestID, req.Overlap, now)
			if accepted {
				last := sch.State.Requests[len(sch.State.Requests)-1]
				triggerRun = schedule.RunID(sch.Name, event.ScheduleTrigger, last.At, last.ID)
			}
		case api.ScheduleOpBackfill:
			accepted, err = sch.Backfill(t, req.RequestID, req.Start, req.End, req.Overlap, now)
		}
		return err
	}, req.Next, &accepted)
	if e != nil {
		return nil, e
	}
	if op == api.ScheduleOpTrigger || op == api.ScheduleOpBackfill {
		d.RequestID, d.TriggerRunID = req.RequestID, triggerRun
	}
	return d, nil
}

// change applies change to schedule name by compare-and-set, reading it again after a lost
// race. A change that leaves *accepted false (a repeated trigger or backfill) writes nothing.
func (s *Store) change(ctx context.Context, name string, change func(*schedule.Schedule, *schedule.Timing) error,
	next int, accepted *bool) (*api.ScheduleDescription, *api.IngressError) {
	for range changeAttempts {
		sch, rev, t, e := s.Get(ctx, name)
		if e != nil {
			return nil, e
		}
		if err := change(sch, t); err != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(err)}
		}
		if !*accepted {
			// A repeated trigger or backfill: nothing to write.
			return Describe(sch, t, time.Now(), next), nil
		}
		if _, err := s.b.Update(ctx, name, *sch, rev); err != nil {
			if errors.Is(err, typedkv.ErrEncode) {
				return nil, &api.IngressError{Code: api.CodeIngressInternal, Message: err.Error()}
			}
			if typedkv.IsConflict(err) {
				continue
			}
			return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("storing schedule %q: %v; retry", name, err)}
		}
		d := Describe(sch, t, time.Now(), next)
		d.Accepted = *accepted
		return d, nil
	}
	return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("schedule %q kept changing under %d attempts; retry", name, changeAttempts)}
}
