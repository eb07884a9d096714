package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/internal/typedkv"
)

// Errors of the store.
var (
	// ErrNotFound: no job has the ID.
	ErrNotFound = errors.New("batch: no such job")
	// ErrExists: a job with the ID exists with another spec.
	ErrExists = errors.New("batch: a job with this ID exists with another spec")
	// ErrConflict: the job changed since it was read.
	ErrConflict = errors.New("batch: the job changed since it was read")
)

// Store reads and writes jobs and their targets in FLOW_BATCHES.
type Store struct {
	kv jetstream.KeyValue
}

// Open opens FLOW_BATCHES (streams.Ensure creates it).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, streams.BatchesBucket)
	if err != nil {
		return nil, fmt.Errorf("batch: opening bucket %s: %w (streams.Ensure creates it)", streams.BatchesBucket, err)
	}
	return &Store{kv: kv}, nil
}

func jobKey(id string) string { return "job." + id }

func targetsKey(id string, n int) string { return "targets." + id + "." + strconv.Itoa(n) }

// Create writes a new pending job. A job with the same ID and spec is returned as it stands
// (created false): a create that is retried finds its job; one with another spec is ErrExists.
func (s *Store) Create(ctx context.Context, j Job) (Job, bool, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return Job{}, false, err
	}
	_, err = s.kv.Create(ctx, jobKey(j.ID), b)
	if err == nil {
		return j, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return Job{}, false, fmt.Errorf("batch: creating job %q: %w", j.ID, err)
	}
	old, _, gerr := s.Get(ctx, j.ID)
	if gerr != nil {
		return Job{}, false, gerr
	}
	if !sameSpec(old.Spec, j.Spec) {
		return old, false, fmt.Errorf("%w: job %q (%s, where %s)", ErrExists, j.ID, old.Spec.Op, old.Spec.Where)
	}
	return old, false, nil
}

func sameSpec(a, b Spec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return reflect.DeepEqual(ja, jb)
}

// Get returns job id and its revision, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (Job, uint64, error) {
	e, err := s.kv.Get(ctx, jobKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Job{}, 0, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return Job{}, 0, fmt.Errorf("batch: reading job %q: %w", id, err)
	}
	var j Job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return Job{}, 0, fmt.Errorf("batch: job %q: %w", id, err)
	}
	return j, e.Revision(), nil
}

// Update writes j if its entry is still at revision rev, and returns the new revision, or an
// error wrapping ErrConflict.
func (s *Store) Update(ctx context.Context, j Job, rev uint64) (uint64, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return 0, err
	}
	r, err := s.kv.Update(ctx, jobKey(j.ID), b, rev)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %q", ErrConflict, j.ID)
	}
	if err != nil {
		return 0, fmt.Errorf("batch: writing job %q: %w", j.ID, err)
	}
	return r, nil
}

// Change applies ev to job id with a compare-and-set, reading it again after a conflict, and
// returns the job as written (or, when Next refuses ev, the job as it stands and the error).
func (s *Store) Change(ctx context.Context, id string, ev Event) (Job, error) {
	for {
		j, rev, err := s.Get(ctx, id)
		if err != nil {
			return Job{}, err
		}
		next, err := Next(j, ev)
		if err != nil {
			return j, err
		}
		if reflect.DeepEqual(next, j) {
			return j, nil
		}
		if _, err := s.Update(ctx, next, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return Job{}, err
		}
		return next, nil
	}
}

// Stop asks job id to stop: a pending job stops at once, a running one at the end of its
// current window; an ended one is returned as it is.
func (s *Store) Stop(ctx context.Context, id, reason string, now time.Time) (Job, error) {
	return s.Change(ctx, id, Event{Kind: EventStopRequested, At: now, Reason: reason})
}

// List returns every job, the most recently created first.
func (s *Store) List(ctx context.Context) ([]Job, error) {
	w, err := s.kv.Watch(ctx, "job.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("batch: listing jobs: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Job
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("batch: the watch of the jobs closed")
			}
			if e == nil {
				slices.SortFunc(out, func(a, b Job) int { return b.CreatedAt.Compare(a.CreatedAt) })
				return out, nil
			}
			var j Job
			if err := json.Unmarshal(e.Value(), &j); err == nil {
				out = append(out, j)
			}
		}
	}
}

// PutTargets writes chunk n of job id's targets.
func (s *Store) PutTargets(ctx context.Context, id string, n int, runIDs []string) error {
	b, err := json.Marshal(runIDs)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, targetsKey(id, n), b); err != nil {
		return fmt.Errorf("batch: writing chunk %d of job %q's targets: %w", n, id, err)
	}
	return nil
}

// Targets reads chunk n of job id's targets.
func (s *Store) Targets(ctx context.Context, id string, n int) ([]string, error) {
	e, err := s.kv.Get(ctx, targetsKey(id, n))
	if err != nil {
		return nil, fmt.Errorf("batch: reading chunk %d of job %q's targets: %w", n, id, err)
	}
	var ids []string
	if err := json.Unmarshal(e.Value(), &ids); err != nil {
		return nil, fmt.Errorf("batch: chunk %d of job %q's targets: %w", n, id, err)
	}
	return ids, nil
}

// JobEntry is a job's entry as watched: its Value the job, Err set when the entry does not
// decode (Value zero). Deletions are not watched.
type JobEntry = typedkv.Entry[Job]

// JobWatcher follows the jobs (Store.Watch).
type JobWatcher = typedkv.Watcher[Job]

// Watch follows the jobs' entries: the current ones, then nil, then every change (deletions
// left out), until JobWatcher.Stop or the end of ctx, which close its Updates.
func (s *Store) Watch(ctx context.Context) (*JobWatcher, error) {
	kw, err := s.kv.Watch(ctx, "job.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	return typedkv.Follow(kw, func(value []byte) (Job, error) {
		var j Job
		err := json.Unmarshal(value, &j)
		return j, err
	}), nil
}
