package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// Watch calls fn with each event of run runID after seq after, as they are committed, until the
// run ends (after its terminal event), fn returns an error, or ctx ends.
func (c *Client) Watch(ctx context.Context, runID string, after uint64, fn func(event.Envelope) error) error {
	return c.follow(ctx, runID, after, true, func(nats.Header) bool { return true }, func(hist []event.Envelope) (bool, error) {
		for _, e := range hist {
			if err := fn(e); err != nil {
				return true, err
			}
			if e.Type().Terminal() {
				return true, nil
			}
		}
		return false, nil
	})
}

// Result waits until run runID ends, following continuations (waiting for a successor that is
// not started yet), and decodes its output into out (which may be nil). A run that did not
// complete returns a *RunError; so does a blocked run, at once, with its diagnosis.
//
// Result reads only the run's last commit, never its whole history: when a commit notice says the
// run may have ended, and every second while it waits.
func (c *Client) Result(ctx context.Context, runID string, out any) error {
	first := true
	for {
		end, err := c.awaitEnd(ctx, runID, first)
		if err != nil {
			return err
		}
		c.seen.note(runID, end.Seq)
		if end.Status == StatusContinuedAsNew {
			runID, first = end.Outcome.SuccessorRunID, false
			continue
		}
		return DecodeResult(end, out)
	}
}

// awaitEnd waits until run runID's last commit ends it or blocks it, and returns what that commit
// says (core.Ending). A run without events is an error wrapping ErrNotFound when mustExist is
// set; otherwise awaitEnd waits for it to start.
func (c *Client) awaitEnd(ctx context.Context, runID string, mustExist bool) (*Snapshot, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	woken := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(streams.HistorySubject(runID), func(m *nats.Msg) {
		if endNotice(m.Header) {
			select {
			case woken <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// check reads the run's last commit; full also projects the whole history, to find a run
	// blocked before its last commit (inputs that arrived after decision.failed).
	check := func(full bool) (*Snapshot, bool, error) {
		last, err := c.store.LastCommit(ctx, runID)
		if err != nil {
			return nil, false, err
		}
		if len(last) == 0 {
			if mustExist {
				// The run may exist on a replica that lags: ask the stream's leader.
				if hist, err := c.store.LoadAtLeast(ctx, runID, 0, 1); err != nil || len(hist) == 0 {
					return nil, false, errors.Join(err, fmt.Errorf("%w: run %q does not exist (list runs with `flow runs`)", ErrNotFound, runID))
				}
				mustExist = false
			}
			return nil, false, nil
		}
		mustExist = false
		if end, ok := core.Ending(last[len(last)-1]); ok {
			return end, true, nil
		}
		if !full {
			return nil, false, nil
		}
		hist, err := c.store.LoadAtLeast(ctx, runID, 0, last[len(last)-1].Seq)
		if err != nil {
			return nil, false, err
		}
		s, err := core.Project(runID, hist)
		if err != nil || s.Status != StatusBlocked {
			return nil, false, err
		}
		return s, true, nil
	}
	retries := 8 // until a notice comes, look every second
	poll := time.NewTimer(0)
	defer poll.Stop()
	for first := true; ; first = false {
		full := false
		select {
		case <-woken:
			retries = 0
		case <-poll.C:
			// Each second after the first look, project the whole history too.
			full = retries >= 8 && !first
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		end, done, err := check(full)
		if err != nil || done {
			return end, err
		}
		// A notice comes before the stream stored its commit (by tens of microseconds), or for
		// a publish the stream refused: look again very soon, then less and less often, then
		// every second.
		wait := time.Second
		if retries < 8 {
			wait = 25 * time.Microsecond << (2 * retries)
			retries++
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(wait)
	}
}

// endNotice reports whether a commit notice may end a wait for a run's result: the run's start
// (a successor appearing), its end, or a failed decision (a blocked run).
func endNotice(h nats.Header) bool {
	t, ok := strings.CutPrefix(h.Get(jsstore.HeaderType), jsstore.TypePrefix)
	return ok && (event.Type(t).Terminal() || t == string(event.TypeDecisionFailed) || t == string(event.TypeRunStarted))
}

// follow calls fn with the events of run runID after seq after, then with each batch of new
// ones as they are committed, until fn reports done or ctx ends. A run without events is an
// error wrapping ErrNotFound when mustExist is set; otherwise follow waits for it to start.
//
// New commits are noticed through core NATS deliveries on the run's subject, and read from the
// store: a delivery is only a hint, since a publish the stream refused (another writer won the
// sequence) is delivered too, and a delivery can precede the stream storing its commit. Only
// deliveries wake reports true for cause a read; a commit published just before the
// subscription took effect reaches no one, so follow also reads every second while it waits.
func (c *Client) follow(ctx context.Context, runID string, after uint64, mustExist bool, wake func(nats.Header) bool, fn func([]event.Envelope) (bool, error)) error {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return err
	}
	var mu sync.Mutex
	var heard uint64
	woken := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(streams.HistorySubject(runID), func(m *nats.Msg) {
		last, ok := jsstore.LastSeq(m.Header)
		if !ok || !wake(m.Header) {
			return
		}
		mu.Lock()
		heard = max(heard, last)
		mu.Unlock()
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()

	read := func(atLeast uint64) (bool, error) {
		hist, err := c.store.LoadAtLeast(ctx, runID, after, atLeast)
		if err != nil {
			return true, err
		}
		if len(hist) == 0 {
			return false, nil
		}
		after = hist[len(hist)-1].Seq
		c.seen.note(runID, after)
		return fn(hist)
	}
	hist, err := c.store.LoadAtLeast(ctx, runID, after, max(c.seen.get(runID), after+1))
	if err != nil {
		return err
	}
	if mustExist && after == 0 && len(hist) == 0 {
		return fmt.Errorf("%w: run %q does not exist (list runs with `flow runs`)", ErrNotFound, runID)
	}
	if len(hist) > 0 {
		after = hist[len(hist)-1].Seq
		c.seen.note(runID, after)
		if done, err := fn(hist); done || err != nil {
			return err
		}
	}
	poll := time.NewTimer(time.Second)
	defer poll.Stop()
	retries := 0
	for {
		select {
		case <-woken:
		case <-poll.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		want := heard
		mu.Unlock()
		if done, err := read(want); done || err != nil {
			return err
		}
		wait := time.Second
		switch {
		case want <= after:
			retries = 0
		case retries < 8:
			// Heard of a commit the stream does not hold yet (or never will, if the stream
			// refused it): read again shortly, a few times.
			wait = time.Millisecond << retries
			retries++
		default:
			mu.Lock()
			heard = after
			mu.Unlock()
			retries = 0
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(wait)
	}
}
