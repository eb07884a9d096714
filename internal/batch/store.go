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

	"github.com/flowrun/flow/internal/backend/streams"
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
	// jobs reads and writes the "job.<id>" entries, targets the "targets.<id>.<n>" ones.
	jobs    *typedkv.Bucket[Job]
	targets *typedkv.Bucket[[]string]
}

// Open opens FLOW_BATCHES (streams.Ensure creates it).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	jobs, err := typedkv.Open[Job](ctx, js, streams.BatchesBucket)
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	return &Store{jobs: jobs, targets: typedkv.View(jobs, typedkv.Codec[[]string]{})}, nil
}

func jobKey(id string) string { return "job." + id }

func targetsKey(id string, n int) string { return "targets." + id + "." + strconv.Itoa(n) }

// Create writes a new pending job. A job with the same ID and spec is returned as it stands
// (created false): a create that is retried finds its job; one with another spec is ErrExists.
func (s *Store) Create(ctx context.Context, j Job) (Job, bool, error) {
	_, err := s.jobs.Create(ctx, jobKey(j.ID), j)
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
	e, found, err := s.jobs.Get(ctx, jobKey(id))
	if err != nil {
		return Job{}, 0, fmt.Errorf("batch: reading job %q: %w", id, err)
	}
	if !found {
		return Job{}, 0, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if e.Err != nil {
		return Job{}, 0, fmt.Errorf("batch: job %q: %w", id, e.Err)
	}
	return e.Value, e.Revision, nil
}

// Update writes j if its entry is still at revision rev, and returns the new revision, or an
// error wrapping ErrConflict.
func (s *Store) Update(ctx context.Context, j Job, rev uint64) (uint64, error) {
	r, err := s.jobs.Update(ctx, jobKey(j.ID), j, rev)
	if typedkv.IsConflict(err) {
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
	entries, err := s.jobs.List(ctx, "job.*")
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("batch: listing jobs: %w", err)
	}
	var out []Job
	for _, e := range entries {
		if e.Err == nil {
			out = append(out, e.Value)
		}
	}
	slices.SortFunc(out, func(a, b Job) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// PutTargets writes chunk n of job id's targets.
func (s *Store) PutTargets(ctx context.Context, id string, n int, runIDs []string) error {
	if _, err := s.targets.Put(ctx, targetsKey(id, n), runIDs); err != nil {
		return fmt.Errorf("batch: writing chunk %d of job %q's targets: %w", n, id, err)
	}
	return nil
}

// Targets reads chunk n of job id's targets.
func (s *Store) Targets(ctx context.Context, id string, n int) ([]string, error) {
	e, found, err := s.targets.Get(ctx, targetsKey(id, n))
	if err == nil && !found {
		err = jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("batch: reading chunk %d of job %q's targets: %w", n, id, err)
	}
	if e.Err != nil {
		return nil, fmt.Errorf("batch: chunk %d of job %q's targets: %w", n, id, e.Err)
	}
	return e.Value, nil
}

// JobEntry is a job's entry as watched: its Value the job, Err set when the entry does not
// decode (Value zero). Deletions are not watched.
type JobEntry = typedkv.Entry[Job]

// JobWatcher follows the jobs (Store.Watch).
type JobWatcher = typedkv.Watcher[Job]

// Watch follows the jobs' entries: the current ones, then nil, then every change (deletions
// left out), until JobWatcher.Stop or the end of ctx, which close its Updates.
func (s *Store) Watch(ctx context.Context) (*JobWatcher, error) {
	return s.jobs.WatchKeys(ctx, []string{"job.*"}, jetstream.IgnoreDeletes())
}
