package history

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
)

// Damaged histories (docs/errors.md#damaged-history-flowerrdamaged). A run's subject may hold
// messages that are not its history (a message without commit headers, a commit whose
// sequences repeat or skip, events that break the history's invariants), written by hand or by
// a faulty writer. The lanes find them (resync) and quarantine the run; a snapshot query shows
// the history's longest valid prefix and why the rest is not (describeDamaged); an operator
// releases the run with a repair, a commit that begins with run.damage_accepted (appended by
// acceptDamage, or by the engine's Terminate), whose application lifts the quarantine.

// quarantineDamaged quarantines run runID with reason, unless it is quarantined already, and
// returns the *store.DamagedError its readers get. The run's index entry shows what snap, the
// projection of its history's valid prefix (nil if none), says of it: a run whose commits were
// not applied yet would else be indexed with nothing but the damage.
func (s *Service) quarantineDamaged(ctx context.Context, runID, reason string, snap *core.Snapshot) error {
	if why, ok := s.store.Damage(runID); ok {
		return &store.DamagedError{RunID: runID, Reason: why}
	}
	if err := s.quarantine(ctx, runID, reason); err != nil {
		return err
	}
	if snap != nil {
		if err := s.writeIndex(ctx, runID, &followed{s: snap}); err != nil {
			return err
		}
	}
	return &store.DamagedError{RunID: runID, Reason: reason}
}

// salvaged returns the projection of run runID's valid prefix, or nil.
func (s *Service) salvaged(ctx context.Context, runID string) *core.Snapshot {
	sv, err := s.engine.Salvage(ctx, runID)
	if err != nil {
		return nil
	}
	return sv.Snapshot
}

// release lifts the quarantine of run runID.
func (s *Service) release(ctx context.Context, runID string) error {
	err := s.damaged.Release(ctx, runID)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	s.store.Release(runID)
	return s.showDamage(ctx, runID, "")
}

// indexedStarted reports whether the runs index knows run runID as started (an entry that is
// neither a tombstone nor a bare quarantine mark): a commit of sequence 1 is then no new run's.
func (s *Service) indexedStarted(runID string) bool {
	sum, ok := s.index.get(runID)
	return ok && sum.Seq > 0 && sum.Deleted == nil
}

// resync judges run runID by reading its whole history, past commits (messages of the run that
// raised an anomaly in apply, or hold a repair), whether or not the run is quarantined. A
// history that does not read back whole or breaks an invariant quarantines the run (an error
// wrapping store.ErrDamaged). A valid one is followed again from scratch: a repair among commits
// lifts the run's quarantine (and the index entry is replaced, even if it named a later
// sequence), and the consequences of the whole history are applied again, as a sweep does. A
// quarantined run without a repair stays quarantined: its history may have lost its end.
func (l *lane) resync(ctx context.Context, runID string, commits []pending) error {
	s := l.s
	l.cache.drop(runID)
	sv, err := s.engine.Salvage(ctx, runID)
	if err != nil {
		return fmt.Errorf("reading run %q: %w", runID, err)
	}
	if sv.Damage != nil || sv.Snapshot == nil {
		why := "its first commit is not valid"
		if sv.Damage != nil {
			why = sv.Damage.Error()
		}
		return s.quarantineDamaged(ctx, runID, fmt.Sprintf("stream %s: %s", s.layout.StreamOf(runID), why), sv.Snapshot)
	}
	var repairs []pending
	for _, p := range commits {
		if p.ok && jsstore.IsRepair(p.msg.Headers()) {
			repairs = append(repairs, p)
		}
	}
	if reason, quarantined := s.store.Damage(runID); quarantined {
		if len(repairs) == 0 {
			return &store.DamagedError{RunID: runID, Reason: reason}
		}
		if err := s.release(ctx, runID); err != nil {
			return err
		}
	}
	snap, hist := sv.Snapshot, sv.History
	s.registerHooks(ctx, snap)
	if err := s.engine.ApplyCommit(ctx, snap, hist); err != nil {
		return err
	}
	if err := s.control.apply(ctx, snap, hist); err != nil {
		return err
	}
	f := &followed{s: snap, pos: sv.Pos, rewrite: len(repairs) > 0}
	for _, p := range repairs {
		if envs, payloads, err := jsstore.DecodeCommit(runID, p.c.First, p.c.Last, p.msg.Data()); err == nil && p.c.Last <= snap.Seq {
			l.feed.publish(f, envs, payloads)
		}
	}
	if err := s.writeIndex(ctx, runID, f); err != nil {
		return err
	}
	f.derived = snap.Seq
	if !snap.Terminal() {
		l.cache.put(runID, f)
	}
	return nil
}

// describeDamaged answers a snapshot request for run req.RunID, whose history is damaged (dmg
// is what reading it gave): the snapshot of the history's longest valid prefix, with why the
// rest is not valid. A run without a valid first commit gets dmg.
func (s *Service) describeDamaged(ctx context.Context, req api.GetRequest, dmg *api.Error) (*api.GetResponse, error) {
	sv, err := s.engine.Salvage(ctx, req.RunID)
	if err != nil || sv.Snapshot == nil {
		return nil, dmg
	}
	reason, quarantined := s.store.Damage(req.RunID)
	switch {
	case quarantined:
	case sv.Damage != nil:
		reason = fmt.Sprintf("stream %s: %v", s.layout.StreamOf(req.RunID), sv.Damage)
	default:
		reason = dmg.Message
	}
	last := sv.Snapshot.Seq
	if req.At > last {
		return nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("the history of run %q is damaged and valid through seq %d; ask for a sequence from 1 to %d", req.RunID, last, last)}
	}
	snap := sv.Snapshot
	if req.At > 0 {
		if snap, err = core.Project(req.RunID, sv.History[:req.At]); err != nil {
			return nil, err
		}
	}
	resp := &api.GetResponse{Snapshot: snap, Last: last, Damage: &api.RunDamage{Reason: reason, ValidThrough: last, Quarantined: quarantined}}
	if entry, ok := s.index.get(req.RunID); ok {
		resp.Entry = &entry
	}
	return resp, nil
}

// acceptDamage releases run runID from its damaged history (flow resume RUN --accept-damage): it
// appends run.damage_accepted after the run's last message, so that the run goes on from its
// longest valid prefix, and lifts its quarantine. It returns the run's snapshot after the
// repair, or nil when the run was not quarantined and its history is valid: there was nothing
// to release.
func (s *Service) acceptDamage(ctx context.Context, runID string) (*core.Snapshot, error) {
	reason, quarantined := s.store.Damage(runID)
	snap, err := s.engine.AcceptDamage(ctx, runID, engine.AcceptDamage{Reason: reason, By: "resume --accept-damage"})
	switch {
	case errors.Is(err, engine.ErrNotDamaged):
		return nil, nil
	case errors.Is(err, core.ErrNotFound) && quarantined:
		// The index knew the run, its history is gone: nothing is left to drive.
		if err := s.release(ctx, runID); err != nil {
			return nil, err
		}
		return nil, nil
	case errors.Is(err, core.ErrInvalidHistory):
		return nil, &api.Error{Code: api.CodeDamaged, Message: err.Error()}
	case err != nil:
		return nil, err
	}
	if quarantined {
		if err := s.release(ctx, runID); err != nil {
			return nil, err
		}
	}
	return snap, nil
}
