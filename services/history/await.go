package history

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// noticeRetries is how many reads follow a notice, 25µs, 50µs, ... 25µs<<(noticeRetries-1)
// (about 0.4s) apart, before the await falls back to the slow poll.
const noticeRetries = 15

// maxAwaits bounds the awaits held at once; each holds a subscription and a goroutine.
const maxAwaits = 100_000

// defaultAwaitPoll is the period of an await's slow poll, which stands in for a lost notice.
const defaultAwaitPoll = time.Second

// await answers once run req.RunID's last commit ends or blocks it, or after req.Wait.
//
// It never misses an end. It listens to two notices of a commit, both subscribed before its
// first read of the run's last commit (a connection's subscriptions take effect before its later
// requests): the stream subject's delivery, which comes first but may come before the stream
// stores the commit (and so reach no one if it was routed before the subscription, while the
// read came before the store), and the event feed's, which this service publishes only after
// the stream stored the commit, so that one routed before the subscription was stored before the
// read.
func (s *Service) await(ctx context.Context, req api.AwaitRequest) (*api.AwaitResponse, error) {
	if err := event.ValidateDerivedRunID(req.RunID); err != nil {
		return nil, &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	}
	wait := req.Wait
	if wait <= 0 {
		wait = api.DefaultAwait
	}
	ctx, cancel := context.WithTimeout(ctx, min(wait, api.MaxAwait))
	defer cancel()
	woken := make(chan struct{}, 1)
	wake := func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	}
	// announced is the last sequence of a commit a notice announced as one that may end the wait.
	var announced atomic.Uint64
	announce := func(seq uint64) {
		for cur := announced.Load(); seq > cur; cur = announced.Load() {
			if announced.CompareAndSwap(cur, seq) {
				return
			}
		}
	}
	sub, err := s.nc.Subscribe(s.layout.Subject(req.RunID), func(m *nats.Msg) {
		if endNotice(m.Header) {
			if seq, ok := jsstore.LastSeq(m.Header); ok {
				announce(seq)
			}
			wake()
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Of the feed, only the events that may end a wait: run.* (started and the terminal ones)
	// and decision.failed.
	onFeed := func(m *nats.Msg) {
		if t, ok := strings.CutPrefix(m.Header.Get(cloudevent.HeaderType), FeedTypePrefix); ok && endType(event.Type(t)) {
			if seq, err := strconv.ParseUint(m.Header.Get(feedSeqHeader), 10, 64); err == nil {
				announce(seq)
			}
			wake()
		}
	}
	for _, suffix := range []string{".run.*", "." + string(event.TypeDecisionFailed)} {
		feed, err := s.nc.Subscribe(FeedPrefix+"*."+req.RunID+suffix, onFeed)
		if err != nil {
			return nil, err
		}
		defer func() { _ = feed.Unsubscribe() }()
	}
	mustExist := req.MustExist
	// check reads the run's last commit; full also projects the whole history, to find a run
	// blocked before its last commit (inputs that arrived after decision.failed).
	check := func(full bool) (*core.Snapshot, error) {
		last, err := s.store.LastCommit(ctx, req.RunID)
		if err != nil {
			return nil, err
		}
		if len(last) == 0 {
			if mustExist {
				// The run may exist on a replica that lags: ask the stream's leader.
				if hist, err := s.store.LoadAtLeast(ctx, req.RunID, 0, 1); err != nil || len(hist) == 0 {
					return nil, errors.Join(err, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("run %q does not exist (list runs with `flow runs`)", req.RunID)})
				}
				mustExist = false
			}
			return nil, nil
		}
		mustExist = false
		if last[0].Type() == event.TypeRunDeleted {
			// Deleted after its retention period: its end is in its archive.
			hist, err := s.history(ctx, req.RunID, 0, 0)
			if err != nil {
				return nil, err
			}
			return core.Project(req.RunID, hist)
		}
		if end, ok := core.Ending(last[len(last)-1]); ok {
			return end, nil
		}
		// A repair (run.damage_accepted) may follow the end of a run whose damage was accepted.
		if !full && last[0].Type() != event.TypeRunDamageAccepted {
			return nil, nil
		}
		hist, err := s.store.LoadAtLeast(ctx, req.RunID, 0, last[len(last)-1].Seq)
		if err != nil {
			return nil, err
		}
		snap, err := core.Project(req.RunID, hist)
		if err != nil || snap.Status != core.StatusBlocked && !snap.Terminal() {
			return nil, err
		}
		return snap, nil
	}
	// A run whose last commit is its decision.failed is found blocked by that commit alone; one
	// blocked before inputs that came after, by projecting its history, which only the runs
	// the index shows blocked need (the slow poll projects the others).
	entry, indexed := s.index.get(req.RunID)
	full := indexed && entry.Status == core.StatusBlocked
	retries := noticeRetries
	polled := false // the last check was the slow poll's, not a notice's
	// The run that reuses the ID after the run ended, if any, is looked up alongside the first
	// check: a run can reuse the ID only once it ended, so the lookup, made after the request
	// came, answers for the moment the end was read or a later one. Once a check found the run
	// not ended, no run reused the ID when it ended, and the answer needs no lookup.
	reuse := make(chan string, 1)
	go func() { reuse <- s.reuser(ctx, req.RunID) }()
	sawActive := false
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
	for {
		if s.beforeAwaitCheck != nil {
			s.beforeAwaitCheck(req.RunID, polled)
		}
		end, err := check(full)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return &api.AwaitResponse{}, nil
		}
		if err != nil {
			return nil, err
		}
		if end != nil {
			if polled && end.Status != core.StatusBlocked && !announcedBy(ctx, sub, &announced, end.Seq) {
				s.awaitsByPoll.Add(1) // a notice was missed
			}
			resp := &api.AwaitResponse{Ended: true, Snapshot: end}
			if !sawActive && reusable(end) {
				resp.ReusedBy = <-reuse
			}
			return resp, nil
		}
		sawActive = true
		// A notice comes before the stream stored its commit (by tens of microseconds, more on
		// a busy machine), or for a publish the stream refused: look again very soon, then
		// twice as late each time, then every second, projecting the whole history too.
		poll.Reset(pollAfter(&retries, s.awaitPoll))
		select {
		case <-woken:
			retries, full, polled = 0, false, false
		case <-poll.C:
			full, polled = retries >= noticeRetries, retries >= noticeRetries
		case <-ctx.Done():
			return &api.AwaitResponse{}, nil
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
	}
}

// pollAfter is how long a wait for a run's commit sleeps before it reads again without a
// notice: 25µs after a notice, twice as long each time after that for noticeRetries reads
// (counted in retries, which a notice sets back to 0), then slow.
func pollAfter(retries *int, slow time.Duration) time.Duration {
	if *retries >= noticeRetries {
		return slow
	}
	d := 25 * time.Microsecond << *retries
	*retries++
	return d
}

// announcedBy reports whether a notice on sub, the subscription to the run's history subject,
// announced the commit that ended the run at seq (announced holds the last sequence its notices
// announced). The slow poll may find an end while that commit's notice is still being delivered:
// the notice is routed before the stream stores the commit, so it reached the connection before
// the read that found the end, but its callback may not have run yet. sub.Pending counts a
// message until its callback has returned, so once it is zero every notice that came before the
// read has been seen.
func announcedBy(ctx context.Context, sub *nats.Subscription, announced *atomic.Uint64, seq uint64) bool {
	for announced.Load() < seq {
		if n, _, err := sub.Pending(); err != nil || n == 0 {
			return false
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// AwaitsByPoll counts the awaits answered by the slow poll before any notice of the commit that
// ended the run came: zero unless a notice was lost. For tests and stats.
func (s *Service) AwaitsByPoll() int64 { return s.awaitsByPoll.Load() }

// endNotice reports whether a commit notice may end a wait for a run's end: the run's start (a
// successor appearing), a commit that ends it, or a failed decision (a blocked run).
func endNotice(h nats.Header) bool {
	types := h.Get(jsstore.HeaderTypes)
	if types == "" { // a commit written before ce-flowtypes: its ce-type names its last event
		types = strings.TrimPrefix(h.Get(jsstore.HeaderType), jsstore.TypePrefix)
	}
	for t := range strings.SplitSeq(types, ",") {
		if endType(event.Type(t)) {
			return true
		}
	}
	return false
}

// feedSeqHeader is the header of a feed event that holds its sequence in its run.
var feedSeqHeader = cloudevent.ExtensionHeader(FeedExtSeq)

func endType(t event.Type) bool {
	return t.Terminal() || t == event.TypeDecisionFailed || t == event.TypeRunStarted
}
