package flow

import (
	"github.com/flowrun/flow/internal/payload"

	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/pkg/event"
)

// Watch calls fn with each event of run runID after seq after, as they are committed, until the
// run ends (after its terminal event), fn returns an error, or ctx ends. An unknown run is an
// error wrapping ErrNotFound.
//
// Events are read from the history service in pages; the event feed (flow.events.>) tells when
// to read again, and Watch also reads every few seconds in case a notice was lost.
func (c *Client) Watch(ctx context.Context, runID string, after uint64, fn func(event.Envelope) error) error {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return err
	}
	sub, err := c.nc.SubscribeSync(api.FeedPrefix + "*." + runID + ".>")
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The subscription takes effect before the first read (a connection's messages are
	// processed in order), and the feed publishes an event only after the stream stored it: an
	// event the read misses is delivered.
	var atLeast uint64
	for first := true; ; first = false {
		for {
			page, more, err := c.HistoryPage(ctx, runID, after, 0)
			if err != nil {
				if first && after == 0 && errors.Is(err, ErrNotFound) {
					return fmt.Errorf("%w: run %q does not exist (list runs with `flow runs`)", ErrNotFound, runID)
				}
				if !errors.Is(err, ErrNotFound) {
					return err
				}
			}
			for _, e := range page {
				if err := fn(e); err != nil {
					return err
				}
				after = e.Seq
				if e.Type().Terminal() {
					return nil
				}
			}
			if !more {
				break
			}
		}
		// Wait for a notice of an event after the last one read, or poll.
		for atLeast <= after {
			wctx, cancel := context.WithTimeout(ctx, watchPoll)
			m, err := sub.NextMsgWithContext(wctx)
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				break // poll
			}
			if seq, ok := feedSeq(m); ok {
				atLeast = max(atLeast, seq)
			}
		}
	}
}

// watchPoll is how often Watch reads without a notice.
const watchPoll = 5 * time.Second

func feedSeq(m *nats.Msg) (uint64, bool) {
	var seq uint64
	_, err := fmt.Sscan(m.Header.Get(cloudevent.ExtensionHeader(api.FeedExtSeq)), &seq)
	return seq, err == nil
}

// Result waits until run runID ends, following continuations (waiting for a successor that is
// not started yet) and the runs that reused its ID after it ended (start policies), and decodes its output into out (which may be nil). A run that did not
// complete returns a *RunError; so does a blocked run, at once, with its diagnosis.
//
// The history service answers as soon as the commit that ends (or blocks) the run is stored; it
// never misses one (see api.SubjectAwait).
func (c *Client) Result(ctx context.Context, runID string, out any) error {
	first := true
	for {
		end, reusedBy, err := c.awaitEnd(ctx, runID, first)
		if err != nil {
			return err
		}
		c.seen.note(runID, end.Seq)
		if end.Status == StatusContinuedAsNew {
			runID, first = end.Outcome.SuccessorRunID, false
			continue
		}
		// A run that reused the ID after this one ended (start policies) is the latest.
		if reusedBy != "" {
			runID, first = reusedBy, false
			continue
		}
		if end.Status == StatusCompleted && end.Outcome != nil && payload.IsRef(end.Outcome.Output) && out != nil {
			o := *end.Outcome
			if o.Output, err = c.Payload(ctx, o.Output); err != nil {
				return err
			}
			e := *end
			e.Outcome = &o
			end = &e
		}
		return DecodeResult(end, out)
	}
}

// awaitEnd asks the history service, again and again, to answer once run runID ends or blocks.
// reusedBy is the run that reuses its ID after it ended, if any (api.AwaitResponse.ReusedBy).
func (c *Client) awaitEnd(ctx context.Context, runID string, mustExist bool) (_ *Snapshot, reusedBy string, _ error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, "", err
	}
	for {
		wait := api.DefaultAwait
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(d), time.Millisecond))
		}
		var resp struct { // api.AwaitResponse, its snapshot decoded into the view
			Ended    bool      `json:"ended"`
			Snapshot *Snapshot `json:"snapshot,omitempty"`
			ReusedBy string    `json:"reused_by,omitempty"`
		}
		qctx, cancel := context.WithTimeout(ctx, wait+5*time.Second)
		err := c.query(qctx, api.SubjectAwait, api.AwaitRequest{RunID: runID, MustExist: mustExist, Wait: wait}, &resp)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
			return nil, "", err
		}
		if resp.Ended && resp.Snapshot != nil {
			return resp.Snapshot, resp.ReusedBy, nil
		}
		mustExist = false // the service checked it exists
	}
}
