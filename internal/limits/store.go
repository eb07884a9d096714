package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/typedkv"
	"github.com/flowrun/flow/pkg/event"
)

// ErrConflict is wrapped by Store.Save when the entry changed since it was read.
var ErrConflict = errors.New("limits: the entry changed since it was read")

// Store reads and writes flow-control state: the groups' in FLOW_LIMITS (Open), whose one writer
// is the admission controller, or the step limits' in FLOW_STEP_LIMITS (OpenSteps), written by
// workers. It is safe for concurrent use.
type Store struct {
	// groups and steps are the bucket's views by value type: FLOW_LIMITS holds States,
	// FLOW_STEP_LIMITS StepStates.
	groups *typedkv.Bucket[*State]
	steps  *typedkv.Bucket[*StepState]
}

// Open returns the store of the flow-control groups, the FLOW_LIMITS bucket, which
// streams.Ensure creates.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	return open(ctx, js, streams.LimitsBucket)
}

// OpenSteps returns the store of the step limits, the FLOW_STEP_LIMITS bucket, which
// streams.Ensure creates.
func OpenSteps(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	return open(ctx, js, streams.StepLimitsBucket)
}

func open(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	groups, err := typedkv.OpenCodec(ctx, js, bucket, typedkv.Codec[*State]{Decode: decodeState[State]})
	if err != nil {
		return nil, err
	}
	return &Store{groups: groups, steps: typedkv.View(groups, typedkv.Codec[*StepState]{Decode: decodeState[StepState]})}, nil
}

// decodeState decodes an entry's value into a new T.
func decodeState[T any](value []byte) (*T, error) {
	v := new(T)
	return v, json.Unmarshal(value, v)
}

// GroupEntry is a change of a group's entry of FLOW_LIMITS as watched: its Key is the group's
// GroupKey, its Value the group's state; Deleted marks a deletion or a purge, Err an entry that
// does not decode.
type GroupEntry = typedkv.Entry[*State]

// GroupWatcher follows the groups' entries of FLOW_LIMITS (Store.WatchGroups).
type GroupWatcher = typedkv.Watcher[*State]

// WatchGroups watches the groups' entries of FLOW_LIMITS for changes from now on (no existing
// entry, no nil marking their end), until GroupWatcher.Stop or the end of ctx.
func (s *Store) WatchGroups(ctx context.Context) (*GroupWatcher, error) {
	return s.groups.WatchKeys(ctx, []string{"g.>"}, jetstream.UpdatesOnly())
}

// Groups lists the flow-control groups that FLOW_LIMITS holds state of, reading each entry for
// its group's name. An entry written before entries named their group is left out: its group
// is known once a run of it queues.
func (s *Store) Groups(ctx context.Context) ([]string, error) {
	keys, err := s.groups.Keys(ctx, "g.>")
	if err != nil {
		return nil, fmt.Errorf("listing the flow-control groups: %w", err)
	}
	var out []string
	for _, k := range keys {
		st, _, err := load(ctx, s.groups, k)
		if err != nil {
			return nil, err
		}
		if st.Group != "" {
			out = append(out, st.Group)
		}
	}
	return out, nil
}

// GroupKey is the FLOW_LIMITS key of flow-control group group.
func GroupKey(group string) string { return "g." + streams.BuildToken(group) }

// StepKey is the FLOW_STEP_LIMITS key of the limits of step name step.
func StepKey(step string) string { return "s." + streams.BuildToken(step) }

// load reads entry key of b; rev 0 means it does not exist. The value is never nil: a new T
// when the entry does not exist or cannot be read.
func load[T any](ctx context.Context, b *typedkv.Bucket[*T], key string) (*T, uint64, error) {
	e, found, err := b.Get(ctx, key)
	if err != nil {
		return new(T), 0, fmt.Errorf("reading %s %s: %w", b.Name(), key, err)
	}
	if !found {
		return new(T), 0, nil
	}
	if e.Err != nil {
		return new(T), 0, fmt.Errorf("%s %s holds malformed state: %w", b.Name(), key, e.Err)
	}
	return e.Value, e.Revision, nil
}

// save writes v as entry key of b if it is still at revision rev (0: if it does not exist),
// and returns the new revision, or an error wrapping ErrConflict.
func save[T any](ctx context.Context, b *typedkv.Bucket[*T], key string, v *T, rev uint64) (uint64, error) {
	rev, err := b.CreateOrUpdate(ctx, key, v, rev)
	if typedkv.IsConflict(err) {
		return 0, fmt.Errorf("%w: %s %s", ErrConflict, b.Name(), key)
	}
	if err != nil {
		return 0, fmt.Errorf("writing %s %s: %w", b.Name(), key, err)
	}
	return rev, nil
}

// Load returns group's state and its revision (0 for a group never written).
func (s *Store) Load(ctx context.Context, group string) (*State, uint64, error) {
	return load(ctx, s.groups, GroupKey(group))
}

// Save writes group's state if it is still at revision rev, and returns the new revision, or an
// error wrapping ErrConflict.
func (s *Store) Save(ctx context.Context, group string, st *State, rev uint64) (uint64, error) {
	st.Group = group
	return save(ctx, s.groups, GroupKey(group), st, rev)
}

// Update applies change to group's current state and writes it by compare-and-set, reading and
// applying again after a conflict, until it is written or change reports no change.
func (s *Store) Update(ctx context.Context, group string, change func(*State) bool) error {
	for {
		st, rev, err := s.Load(ctx, group)
		if err != nil {
			return err
		}
		if !change(st) {
			return nil
		}
		_, err = s.Save(ctx, group, st, rev)
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Release frees run runID's slot in group, if it holds one: idempotent, for the admission
// controller once the run's terminal event is committed.
func (s *Store) Release(ctx context.Context, group, runID string) error {
	return s.Update(ctx, group, func(st *State) bool { return st.Release(runID) })
}

// Waiting is a FLOW_QUEUE entry: a run under flow control that waits for admission, as its
// run.started recorded it.
type Waiting struct {
	RunID      string             `json:"run_id"`
	Definition string             `json:"definition"`
	Queue      string             `json:"queue,omitempty"`
	Priority   int                `json:"priority,omitempty"`
	Control    *event.FlowControl `json:"control"`
	// StartedAt is the time run.started is recorded at: the queue is first come, first served
	// within a priority level by it (then by run ID).
	StartedAt time.Time `json:"started_at"`
}

func isConflict(err error) bool { return errors.Is(err, ErrConflict) }
