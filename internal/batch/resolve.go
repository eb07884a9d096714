package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/filter"
	"github.com/flowrun/flow/internal/runsindex"
)

// Compile compiles the spec's filter against schema (the declarations of spec.Definition's
// runs, or of every definition), as the history service's listing does. Its errors match
// ErrInvalid and filter.ErrInvalid, and say what to write.
func Compile(spec Spec, schema filter.Schema) (*filter.Filter, error) {
	f, err := filter.Compile(spec.Where, schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if f == nil {
		return nil, fmt.Errorf("%w: no filter; say which runs with a where filter", ErrInvalid)
	}
	return f, nil
}

// Resolve returns the IDs of the runs job j targets, sorted: those the runs index (FLOW_RUNS)
// shows matching its filter and definition, started before the job was created. It reads every
// entry the index holds when it is called (a watch's current values), so that a run the index
// changes meanwhile is neither missed nor read twice. limit > 0 stops at that many matches (a
// dry run's sample), and total then still counts them all.
func Resolve(ctx context.Context, js jetstream.JetStream, j *Job, limit int) (ids []string, total int, err error) {
	f, err := Compile(j.Spec, j.Schema)
	if err != nil {
		return nil, 0, err
	}
	runs, err := runsindex.Open(ctx, js)
	if err != nil {
		return nil, 0, fmt.Errorf("batch: opening the runs index: %w", err)
	}
	w, err := runs.Watch(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, 0, fmt.Errorf("batch: reading the runs index: %w", err)
	}
	defer func() { _ = w.Stop() }()
	seen := map[string]bool{}
	for {
		var e *runsindex.Entry
		var ok bool
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case e, ok = <-w.Updates():
		}
		if !ok {
			return nil, 0, errors.New("batch: the watch of the runs index closed")
		}
		if e == nil {
			break
		}
		if seen[e.Key] {
			continue // changed after the watch began: its value then was read
		}
		seen[e.Key] = true
		sum := e.Value
		if e.Deleted || e.Err != nil || !Selects(j, f, sum) {
			continue
		}
		total++
		if limit <= 0 || len(ids) < limit {
			ids = append(ids, sum.RunID)
		}
	}
	slices.Sort(ids)
	return ids, total, nil
}

// Selects reports whether job j, with its compiled filter f, targets the run sum summarises:
// never a deleted run's tombstone, nor a run started after the job was created.
func Selects(j *Job, f *filter.Filter, sum core.Summary) bool {
	if sum.RunID == "" || !sum.StartedAt.Before(j.CreatedAt) || sum.Deleted != nil {
		return false // a tombstone's run is gone (docs/retention.md)
	}
	if j.Spec.Definition != "" && sum.Definition != j.Spec.Definition {
		return false
	}
	return f.Match(sum)
}
