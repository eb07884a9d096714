package flow

import (
	"context"
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
func (c *Client) Result(ctx context.Context, runID string, out any) error {
	first := true
	for {
		s := core.New(runID)
		err := c.follow(ctx, runID, 0, first, endNotice, func(hist []event.Envelope) (bool, error) {
			if err := s.ApplyAll(hist); err != nil {
				return true, err
			}
			return s.Terminal() || s.Status == StatusBlocked, nil
		})
		if err != nil {
			return err
		}
		if s.Status == StatusContinuedAsNew {
			runID, first = s.Outcome.SuccessorRunID, false
			continue
		}
		return DecodeResult(s, out)
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
			return true, c.damaged(err)
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
		return c.damaged(err)
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
