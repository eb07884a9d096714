package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// updateSnapshots bounds the projections the update endpoint keeps.
const updateSnapshots = 1024

// serveUpdates adds the endpoint that tells where an update stands (api.SubjectUpdate), a long
// poll like await: it holds no query slot, only its goroutine, up to maxAwaits at once.
func (s *Service) serveUpdates(svc micro.Service) error {
	held := make(chan struct{}, maxAwaits)
	s.updateSnaps = newSnapshotCache(updateSnapshots)
	return s.addEndpoint(svc, "update", api.SubjectUpdate, held, api.MaxAwait+5*time.Second,
		fmt.Sprintf("%d update waits are held already; retry", maxAwaits), handle(s.awaitUpdate))
}

// awaitUpdate answers where update req.UpdateID of run req.RunID stands: at once without
// req.Wait, else once it settled (rejected, completed or aborted), or a decision failed after
// the update was received (the run is blocked), or after req.Wait. An update a reset carried on
// to its new run (moved) is followed there: the answer is the new run's.
//
// Like await it never misses the commit it waits for: it subscribes to the run's commit notices
// (the stream subject's and the event feed's, see await) before its first read, reads the run
// incrementally on each notice (only the events after its snapshot), and reads again on a
// slowing poll in case a notice came before the stream stored its commit.
func (s *Service) awaitUpdate(ctx context.Context, req api.UpdateRequest) (*api.UpdateState, error) {
	if err := event.ValidateDerivedRunID(req.RunID); err != nil {
		return nil, &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	}
	if err := event.ValidateUpdateID(req.UpdateID); err != nil {
		return nil, &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	}
	wait := min(max(req.Wait, 0), api.MaxAwait)
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	var moved *api.UpdateState
	for range maxUpdateMoves {
		st, err := s.awaitUpdateIn(ctx, req.RunID, req.UpdateID, wait > 0, moved != nil)
		if err != nil || st == nil || st.MovedTo == "" {
			if err != nil && moved != nil {
				return moved, nil // the run it moved to cannot answer yet (not written): ask again
			}
			return st, err
		}
		moved, req.RunID = st, st.MovedTo
	}
	return moved, nil
}

// maxUpdateMoves bounds how many resets an update is followed through.
const maxUpdateMoves = 100

// awaitUpdateIn is awaitUpdate in one run: it returns the update's state in run runID once it
// settled, the run is blocked on it, or it moved (or at once without wait). With movedHere,
// the run may not exist yet (a reset carried the update to it): it is waited for.
func (s *Service) awaitUpdateIn(ctx context.Context, runID, updateID string, wait, movedHere bool) (*api.UpdateState, error) {
	woken := make(chan struct{}, 1)
	if wait {
		wake := func(*nats.Msg) {
			select {
			case woken <- struct{}{}:
			default:
			}
		}
		for _, subject := range []string{s.layout.Subject(runID), FeedPrefix + "*." + runID + ".update.*", FeedPrefix + "*." + runID + ".run.*"} {
			sub, err := s.nc.Subscribe(subject, wake)
			if err != nil {
				return nil, err
			}
			defer func() { _ = sub.Unsubscribe() }()
		}
	}
	// check reads what was committed since the last check (the cache holds the run's
	// projection) and returns the update's state (nil while the run has no such update).
	check := func() (*api.UpdateState, error) {
		var st *api.UpdateState
		err := s.updateSnaps.read(ctx, s.store, runID, 1, func(snap *core.Snapshot) error {
			if snap == nil {
				if movedHere && wait {
					return nil // the reset's new run is about to be written
				}
				return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("run %q does not exist (list runs with `flow runs`)", runID)}
			}
			var ok bool
			st, ok = api.StateOfUpdate(snap, updateID)
			if !ok && (snap.Terminal() || !wait) {
				return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("run %q has no update %q: send it with `flow update` (POST /v1/runs/%s/updates/{name}), or check the run ID (an update to a run that continued as new goes to its latest run)", runID, updateID, runID)}
			}
			return nil
		})
		return st, err
	}
	retries := noticeRetries
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
	var last *api.UpdateState
	for {
		st, err := check()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && last != nil {
			return last, nil
		}
		if err != nil {
			return nil, err
		}
		last = st
		if !wait || st != nil && (st.Settled || st.Blocked != nil || st.MovedTo != "") {
			return st, nil
		}
		poll.Reset(pollAfter(&retries, time.Second))
		select {
		case <-woken:
			retries = 0
		case <-poll.C:
		case <-ctx.Done():
			if last == nil {
				return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("run %q has no update %q yet", runID, updateID)}
			}
			return last, nil
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
	}
}
