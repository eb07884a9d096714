package history

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// The queries, shared by the NATS endpoints and the HTTP handlers. Each returns an *api.Error
// for what the caller must change, or another error (an internal one).

// getRun answers a snapshot request. A run whose history is damaged is shown as far as it is
// valid (describeDamaged).
func (s *Service) getRun(ctx context.Context, req api.GetRequest) (*api.GetResponse, error) {
	hist, err := s.history(ctx, req.RunID, 0, req.AtLeast)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeDamaged {
		return s.describeDamaged(ctx, req, ae)
	}
	if err != nil {
		return nil, err
	}
	snap, err := core.Project(req.RunID, hist)
	if errors.Is(err, core.ErrInvalidHistory) {
		// Not quarantined yet: the lanes have not applied the commit that breaks it.
		return s.describeDamaged(ctx, req, &api.Error{Code: api.CodeDamaged, Message: fmt.Sprintf("the history of run %q is damaged: %v", req.RunID, err)})
	}
	if err != nil {
		return nil, err
	}
	last := hist[len(hist)-1].Seq
	if req.At > last {
		return nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("run %q has %d events; ask for a sequence from 1 to %d", req.RunID, last, last)}
	}
	if req.At > 0 && req.At < last {
		if snap, err = core.Project(req.RunID, hist[:req.At]); err != nil {
			return nil, err
		}
	}
	resp := &api.GetResponse{Snapshot: snap, Last: last}
	if entry, ok := s.index.get(req.RunID); ok {
		resp.Entry = &entry
	}
	if req.At == 0 {
		resp.StepWaits = s.control.stepWaits(ctx, snap)
	}
	return resp, nil
}

// historyPage answers a history request.
func (s *Service) historyPage(ctx context.Context, req api.HistoryRequest) (*api.HistoryResponse, error) {
	limit, err := pageLimit(req.Limit, api.DefaultHistoryLimit, api.MaxHistoryLimit)
	if err != nil {
		return nil, err
	}
	hist, err := s.history(ctx, req.RunID, req.After, req.AtLeast)
	if err != nil {
		return nil, err
	}
	resp := &api.HistoryResponse{Events: hist, More: len(hist) > limit}
	if sum, ok := s.index.get(req.RunID); ok && sum.Deleted != nil {
		resp.Deleted = sum.Deleted // read from its archive
	}
	if resp.More {
		resp.Events = hist[:limit]
	}
	if resp.Events == nil {
		resp.Events = []event.Envelope{}
	}
	return resp, nil
}

// history reads run runID's events after after, up to at least atLeast. A run with no events
// is not found (unless the caller read some already), a quarantined one is a conflict.
func (s *Service) history(ctx context.Context, runID string, after, atLeast uint64) ([]event.Envelope, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	}
	if sum, ok := s.index.get(runID); ok && sum.Deleted != nil {
		return s.readArchived(ctx, sum, after) // retention.go
	}
	hist, err := s.store.LoadAtLeast(ctx, runID, after, max(atLeast, after+1))
	var de *store.DeletedError
	if errors.As(err, &de) {
		// Deleted since this replica's copy of the index last heard of the run.
		sum, terr := core.Tombstone(runID, de.Seq, de.Time, de.Deletion)
		if terr != nil {
			return nil, terr
		}
		return s.readArchived(ctx, sum, after)
	}
	if err == nil && len(hist) == 0 {
		// Deleted since this replica's copy of the index last heard of the run?
		if sum, rev, rerr := s.readEntry(ctx, runID); rerr == nil && rev > 0 && sum.Deleted != nil {
			return s.readArchived(ctx, sum, after)
		}
	}
	var damaged *store.DamagedError
	switch {
	case errors.As(err, &damaged):
		return nil, &api.Error{Code: api.CodeDamaged, Message: damaged.Error()}
	case errors.Is(err, event.ErrMalformed):
		return nil, &api.Error{Code: api.CodeDamaged, Message: fmt.Sprintf("the history of run %q does not read back whole (%v); it is damaged", runID, err)}
	case err != nil:
		return nil, err
	case len(hist) == 0 && after == 0:
		return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("run %q does not exist (list runs with `flow runs`)", runID)}
	}
	return hist, nil
}

// resume dispatches a run again: a parked or blocked run gets a fresh task, a quarantined one is
// released first when the operator accepts its damage.
func (s *Service) resume(ctx context.Context, req api.ResumeRequest) (*api.ResumeResponse, error) {
	if err := event.ValidateDerivedRunID(req.RunID); err != nil {
		return nil, &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	}
	if req.AcceptDamage {
		snap, err := s.acceptDamage(ctx, req.RunID)
		if err != nil {
			return nil, err
		}
		if snap != nil && snap.Terminal() {
			// Released as it ended: there is nothing to dispatch.
			return &api.ResumeResponse{RunID: req.RunID, Seq: snap.Seq, Status: snap.Status}, nil
		}
	}
	hist, err := s.history(ctx, req.RunID, 0, 0)
	if err != nil {
		return nil, err
	}
	snap, err := core.Project(req.RunID, hist)
	if err != nil {
		return nil, &api.Error{Code: api.CodeDamaged, Message: fmt.Sprintf("the history of run %q is damaged: %v", req.RunID, err)}
	}
	if snap.Terminal() {
		return nil, &api.Error{Code: api.CodeConflict, Message: fmt.Sprintf("run %q has ended (%s); there is nothing to resume", req.RunID, snap.Status)}
	}
	if err := s.park.dispatch(ctx, req.RunID, snap.Queue, snap.Spec.BuildID, snap.Seq, "r"+nuid.Next(), s.park.revision(req.RunID)); err != nil {
		return nil, err
	}
	return &api.ResumeResponse{RunID: req.RunID, Seq: snap.Seq, Status: snap.Status}, nil
}
