package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// A run a schedule started goes on as a chain (docs/schedules.md, "Runs that go on"): when it
// continues as new, in its successor (run.continued_as_new); when it is reset, in the new run
// of the reset (run.reset, which ends it). The schedule counts the chain as running until its
// latest run ends; a reset recorded in a run that had ended (a rerun) revives nothing of it. A
// round reads each running chain from the latest run it knows of (schedule.State.Current), so
// retention deleting the runs behind it does not matter; a link
// deleted before the schedule saw past it is followed through its tombstone in the runs index,
// which keeps the links (core.Summary.ContinuedAs, ResetTo).

// maxChainLinks bounds the links one read of a chain follows.
const maxChainLinks = 1000

// chainLink is what one run tells of its chain.
type chainLink struct {
	// missing: no history and no tombstone.
	missing bool
	// deleted: retention deleted the run; what follows comes from its tombstone.
	deleted bool
	// next is the run the chain goes on in (a continuation, the new run of the latest reset).
	next string
	// ended: the run ended, and next is empty.
	ended bool
}

// runChain reads the chain that goes on from run id: its state, and its latest run that has a
// history. Each link costs one direct get of its last commit; a link without one costs a read
// of its runs index entry and a read from the stream's leader. An error is one that may pass
// (NATS unreachable): the round is tried again.
func (r *scheduleRunner) runChain(ctx context.Context, id string) (schedule.Run, error) {
	latest := ""
	for i := range maxChainLinks {
		l, err := r.link(ctx, id)
		if err != nil {
			return schedule.Run{}, err
		}
		switch {
		case l.missing && i == 0:
			return schedule.Run{State: schedule.RunMissing}, nil
		case l.missing:
			// A continuation the history service has yet to start.
			return schedule.Run{State: schedule.RunActive, Latest: latest}, nil
		case l.next != "":
			if !l.deleted {
				latest = id
			}
			id = l.next
		case l.ended:
			return schedule.Run{State: schedule.RunEnded, Latest: id}, nil
		default:
			return schedule.Run{State: schedule.RunActive, Latest: id}, nil
		}
	}
	return schedule.Run{State: schedule.RunActive, Latest: latest}, nil
}

// link reads what run id tells of its chain: from its last commit; from its tombstone when
// retention deleted it; from the stream's leader when the replica that answered has no commit
// of it yet. A quarantined (damaged) run counts as active: it has not ended, and an operator
// releases or ends it.
func (r *scheduleRunner) link(ctx context.Context, id string) (chainLink, error) {
	commit, err := r.store.LastCommit(ctx, id)
	switch {
	case errors.Is(err, store.ErrDamaged):
		return chainLink{}, nil
	case err != nil:
		return chainLink{}, fmt.Errorf("reading run %q: %w", id, err)
	case len(commit) > 0:
		return linkOf(commit), nil
	}
	sum, err := r.indexEntry(ctx, id)
	if err != nil {
		return chainLink{}, err
	}
	if sum != nil && sum.Deleted != nil {
		next := cmp.Or(sum.ResetTo, sum.ContinuedAs)
		return chainLink{deleted: true, next: next, ended: next == ""}, nil
	}
	hist, err := r.store.LoadAtLeast(ctx, id, 0, 1)
	switch {
	case errors.Is(err, store.ErrDamaged):
		return chainLink{}, nil
	case err != nil:
		return chainLink{}, fmt.Errorf("reading run %q: %w", id, err)
	case len(hist) == 0:
		return chainLink{missing: true}, nil
	}
	return linkOf(hist), nil
}

// linkOf returns what events, a run's last commit or its history, tell of its chain.
func linkOf(events []event.Envelope) chainLink {
	var l chainLink
	for _, e := range events {
		switch p := e.Payload.(type) {
		case *event.RunReset:
			// A reset that ended the run goes on in its new run. One recorded after the run
			// had ended (a rerun of an ended run) revives nothing of the chain: the chain
			// ended with that end, and the new run is not the schedule's to count.
			if p.Terminated {
				l.next = p.NewRunID
			} else {
				l.ended = true
			}
		case *event.RunContinuedAsNew:
			l.next = p.SuccessorRunID
		case *event.RunDeleted:
			// Deleted after its retention period: its record keeps its summary's links.
			sum, err := core.Tombstone(e.RunID, e.Seq, e.Time, p)
			l.deleted, l.next = true, cmp.Or(sum.ResetTo, sum.ContinuedAs)
			l.ended = err != nil || l.next == ""
			return l
		}
		if e.Type().Terminal() {
			l.ended = true
		}
	}
	return l
}

// indexEntry returns run id's runs index entry, nil when it has none (or a malformed one,
// logged).
func (r *scheduleRunner) indexEntry(ctx context.Context, id string) (*core.Summary, error) {
	e, found, err := r.runs.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading the runs index entry of run %q: %w", id, err)
	}
	if !found {
		return nil, nil
	}
	if e.Err != nil {
		r.logger.Warn("ignoring a malformed runs index entry", slog.String("run_id", id), slog.String("error", e.Err.Error()))
		return nil, nil
	}
	sum := e.Value
	return &sum, nil
}
