package history

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/runsindex"
)

// writeIndex brings run runID's runs index entry up to date with f: the run's summary, with why
// it is parked or damaged. It writes only when the entry changes, and never replaces an entry
// that names a later sequence (another replica, further ahead, wrote it), unless f.rewrite
// says the run went back to an earlier sequence (a repair of a damaged history): every write
// is a compare-and-set on the entry's revision.
func (s *Service) writeIndex(ctx context.Context, runID string, f *followed) error {
	want := f.s.Summary()
	want.Parked = s.park.reason(want)
	want.Damaged, _ = s.store.Damage(runID)
	for {
		if !f.known && !f.fresh {
			cur, rev, err := s.readEntry(ctx, runID)
			if err != nil {
				return err
			}
			f.indexed, f.indexRev, f.known = cur, rev, true
		}
		if f.known && f.indexRev > 0 && (f.indexed.Seq > want.Seq && !f.rewrite || f.indexed.Equal(want)) {
			return nil
		}
		if f.known && f.indexed.Deleted != nil && !want.StartedAt.After(f.indexed.Deleted.At) {
			return nil // a tombstone is replaced only by a run of its ID started after the deletion
		}
		rev, err := s.putEntry(ctx, want, f.indexRev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			f.known, f.fresh = false, false // someone else wrote it: read it and decide again
			continue
		}
		if err != nil {
			return err
		}
		f.indexed, f.indexRev, f.known, f.fresh, f.rewrite = want, rev, true, false, false
		return nil
	}
}

// showDamage sets the Damaged field of run runID's index entry to reason ("" clears it),
// creating an entry that holds only that for a run the index lacks.
func (s *Service) showDamage(ctx context.Context, runID, reason string) error {
	for {
		cur, rev, err := s.readEntry(ctx, runID)
		if err != nil || cur.Damaged == reason && (rev > 0 || reason == "") {
			return err
		}
		cur.Damaged = reason
		if _, err := s.putEntry(ctx, cur, rev); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err
		}
	}
}

// putEntry writes sum as its run's index entry if the entry is at revision rev (0: absent), and
// returns the entry's new revision. A lost race returns an error wrapping
// jetstream.ErrKeyRevisionMismatch.
func (s *Service) putEntry(ctx context.Context, sum core.Summary, rev uint64) (uint64, error) {
	if err := s.cfg.Faults.Hit(fault.IndexPut); err != nil {
		return 0, err
	}
	var err error
	if rev == 0 {
		rev, err = s.runs.Create(ctx, sum)
		if errors.Is(err, jetstream.ErrKeyExists) {
			err = fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
		}
	} else {
		rev, err = s.runs.Update(ctx, sum, rev)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("writing the runs index entry of run %q: %w", sum.RunID, err)
	}
	if err == nil {
		for cur := s.indexWritten.Load(); rev > cur; cur = s.indexWritten.Load() {
			if s.indexWritten.CompareAndSwap(cur, rev) {
				break
			}
		}
	}
	return rev, err
}

// indexCatchUp bounds how long Start waits for its copy of the runs index to show the entries
// its check wrote.
const indexCatchUp = 30 * time.Second

// showRepairs waits until the service's copy of the runs index, which answers listings, holds
// every index entry the service wrote (at start: the repairs of its check). A copy that does not
// catch up in indexCatchUp is logged, not fatal: the listings show the repairs when it does.
func (s *Service) showRepairs(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, indexCatchUp)
	defer cancel()
	err := s.index.waitApplied(wctx, s.indexWritten.Load())
	if err != nil && ctx.Err() == nil {
		s.logger.WarnContext(ctx, "the copy of the runs index has not caught up with the repairs of the start-up check; listings show them once it does",
			slog.Duration("waited", indexCatchUp))
		return nil
	}
	return err
}

// readEntry returns run runID's runs index entry and its revision; revision 0 when absent.
// An entry that does not decode is returned as one that holds only the run ID, to be replaced.
func (s *Service) readEntry(ctx context.Context, runID string) (core.Summary, uint64, error) {
	e, found, err := s.runs.Get(ctx, runID)
	if err != nil {
		return core.Summary{RunID: runID}, 0, fmt.Errorf("reading the runs index entry of run %q: %w", runID, err)
	}
	if !found {
		return core.Summary{RunID: runID}, 0, nil
	}
	if e.Err != nil || e.Value.RunID != runID {
		return core.Summary{RunID: runID}, e.Revision, nil
	}
	return e.Value, e.Revision, nil
}

// readModel is this replica's copy of the runs index, kept by watching FLOW_RUNS: it answers
// listings without reading the bucket, and finds the parked runs of a definition.
type readModel struct {
	bucket *runsindex.Store
	logger *slog.Logger

	mu    sync.RWMutex
	runs  map[string]core.Summary
	ready chan struct{}
	// blocked counts the entries of blocked runs, for the flow.runs.blocked gauge.
	blocked int
	// applied is the latest revision of FLOW_RUNS the model applied; grew is closed (and
	// replaced) whenever it grows.
	applied uint64
	grew    chan struct{}
	// beforeApply, when set (by tests, before start), runs before each entry is applied.
	beforeApply func()
}

func newReadModel(runs *runsindex.Store, logger *slog.Logger) *readModel {
	return &readModel{bucket: runs, logger: logger, runs: map[string]core.Summary{}, ready: make(chan struct{}), grew: make(chan struct{})}
}

// start watches the bucket and returns once the model holds every entry.
func (m *readModel) start(ctx context.Context, wg *sync.WaitGroup) error {
	w, err := m.bucket.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watching the runs index: %w", err)
	}
	wg.Go(func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					if ctx.Err() == nil {
						m.logger.Error("the runs index watch ended; listings are no longer updated")
					}
					return
				}
				m.apply(e)
			case <-ctx.Done():
				return
			}
		}
	})
	select {
	case <-m.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *readModel) apply(e *runsindex.Entry) {
	if e == nil {
		close(m.ready)
		return
	}
	if m.beforeApply != nil {
		m.beforeApply()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev := e.Revision; rev > m.applied {
		m.applied = rev
		close(m.grew)
		m.grew = make(chan struct{})
	}
	if e.Deleted {
		m.countBlocked(e.Key, nil)
		delete(m.runs, e.Key)
		return
	}
	sum := e.Value
	if e.Err != nil || sum.RunID != e.Key {
		m.logger.Warn("ignoring a malformed runs index entry", slog.String("key", e.Key))
		return
	}
	m.countBlocked(e.Key, &sum)
	m.runs[e.Key] = sum
}

// waitApplied returns once the model applied revision rev of FLOW_RUNS or a later one, or with
// ctx's error.
func (m *readModel) waitApplied(ctx context.Context, rev uint64) error {
	for {
		m.mu.RLock()
		applied, grew := m.applied, m.grew
		m.mu.RUnlock()
		if applied >= rev {
			return nil
		}
		select {
		case <-grew:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// countBlocked updates the count of blocked runs for the entry of runID becoming next (nil
// for a deleted entry). The caller holds m.mu.
func (m *readModel) countBlocked(runID string, next *core.Summary) {
	if prev, ok := m.runs[runID]; ok && prev.Status == core.StatusBlocked {
		m.blocked--
	}
	if next != nil && next.Status == core.StatusBlocked {
		m.blocked++
	}
}

// blockedRuns returns the number of entries of blocked runs.
func (m *readModel) blockedRuns() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int64(m.blocked)
}

// get returns run runID's entry.
func (m *readModel) get(runID string) (core.Summary, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	sum, ok := m.runs[runID]
	return sum, ok
}

// len returns the number of entries.
func (m *readModel) len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.runs)
}

// where returns the entries keep selects, in no particular order.
func (m *readModel) where(keep func(core.Summary) bool) []core.Summary {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []core.Summary
	for _, sum := range m.runs {
		if keep(sum) {
			out = append(out, sum)
		}
	}
	return out
}

// listWhere answers a listing over the entries keep accepts: those that match req, most
// recently updated first (then by run ID), one page after the cursor.
func (m *readModel) listWhere(req api.ListRequest, keep func(core.Summary) bool) (api.ListResponse, error) {
	limit, err := pageLimit(req.Limit, api.DefaultListLimit, api.MaxListLimit)
	if err != nil {
		return api.ListResponse{}, err
	}
	for _, st := range req.Status {
		if !knownStatus(core.Status(st)) {
			return api.ListResponse{}, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("unknown status %q; use one of %s", st, statusNames())}
		}
	}
	after, err := decodeCursor(req.Cursor)
	if err != nil {
		return api.ListResponse{}, err
	}
	match := m.where(func(sum core.Summary) bool { return keep(sum) && matches(req, sum) })
	slices.SortFunc(match, newestFirst)
	resp := api.ListResponse{Total: len(match), Runs: []core.Summary{}}
	start := 0
	if after != nil {
		start, _ = slices.BinarySearchFunc(match, *after, newestFirst)
		if start < len(match) && match[start].RunID == after.RunID {
			start++
		}
	}
	end := min(start+limit, len(match))
	resp.Runs = append(resp.Runs, match[start:end]...)
	if end < len(match) {
		resp.Next = encodeCursor(match[end-1])
	}
	return resp, nil
}

// pageLimit returns a request's page size: def when it asks for none, an error beyond max.
func pageLimit(limit, def, max int) (int, error) {
	switch {
	case limit == 0:
		return def, nil
	case limit < 0 || limit > max:
		return 0, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("limit must be between 1 and %d, got %d", max, limit)}
	}
	return limit, nil
}

func newestFirst(a, b core.Summary) int {
	return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(a.RunID, b.RunID))
}

func matches(req api.ListRequest, sum core.Summary) bool {
	switch {
	case len(req.Status) > 0 && !slices.Contains(req.Status, string(sum.Status)):
	case req.Definition != "" && sum.Definition != req.Definition:
	case req.Queue != "" && queueName(sum.Queue) != req.Queue:
	case req.Build != "" && sum.BuildID != req.Build:
	case req.Parent != "" && sum.Parent != req.Parent:
	case !req.Since.IsZero() && sum.StartedAt.Before(req.Since):
	case !req.Until.IsZero() && !sum.StartedAt.Before(req.Until):
	case req.Parked && sum.Parked == "" && sum.Status != core.StatusBlocked:
	case sum.Deleted != nil && !req.IncludeDeleted:
	default:
		return true
	}
	return false
}

// queueName returns queue, with the default queue named.
func queueName(queue string) string {
	if queue == "" {
		return streams.DefaultQueue
	}
	return queue
}

// A cursor is the last entry of a page: its update time and run ID.
func encodeCursor(sum core.Summary) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(sum.UpdatedAt.UnixNano(), 10) + "/" + sum.RunID))
}

func decodeCursor(c string) (*core.Summary, error) {
	if c == "" {
		return nil, nil
	}
	bad := &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("cursor %q is not one a listing returned; start again without it", c)}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	nanos, runID, ok := strings.Cut(string(b), "/")
	n, err := strconv.ParseInt(nanos, 10, 64)
	if !ok || err != nil || runID == "" {
		return nil, bad
	}
	return &core.Summary{RunID: runID, UpdatedAt: time.Unix(0, n).UTC()}, nil
}

var statuses = []core.Status{core.StatusPending, core.StatusRunning, core.StatusSuspended, core.StatusCancelling,
	core.StatusBlocked, core.StatusCompleted, core.StatusFailed, core.StatusCancelled, core.StatusContinuedAsNew, core.StatusQueued,
	core.StatusPaused}

func knownStatus(st core.Status) bool { return slices.Contains(statuses, st) }

func statusNames() string {
	names := make([]string, len(statuses))
	for i, st := range statuses {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}
