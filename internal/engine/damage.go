package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Damaged histories (docs/errors.md#damaged-history-flowerrdamaged): a run whose stored history
// does not read back whole, or breaks the history's invariants, is quarantined by the history
// service. Salvage shows what it still holds; AcceptDamage releases it from its longest valid
// prefix, or ends it there (Terminate).

// repairStore is what reading and releasing a damaged history needs of a store (jsstore.Store).
type repairStore interface {
	Salvage(ctx context.Context, runID string) (*store.Salvage, error)
	AppendRepair(ctx context.Context, runID string, expected, last uint64, events ...event.Event) (uint64, error)
	// Where names the stream and the subject that hold run runID's events.
	Where(runID string) (stream, subject string)
}

// ErrNotDamaged is returned by AcceptDamage, given no reason, for a run whose whole history is
// valid: there is nothing to release.
var ErrNotDamaged = errors.New("flow: the run's history is not damaged")

// Salvaged is the longest valid prefix of a run's stored history: the commits that read back
// and, applied in order, keep the history's invariants.
type Salvaged struct {
	// Snapshot projects the prefix, History; nil when not even the run's first commit is valid.
	Snapshot *core.Snapshot
	History  []event.Envelope
	// Damage says what ends the prefix before the run's last message (a message that does not
	// read back, or the first commit that breaks an invariant); nil when the whole history is
	// valid.
	Damage error
	// Pos is the store position of the prefix's last commit, Last that of the run's last
	// message.
	Pos, Last uint64
}

// Salvage reads run runID's stored history, quarantined or not, and returns its longest valid
// prefix. It returns an error wrapping core.ErrNotFound for a run without messages, and one
// wrapping errors.ErrUnsupported for a store that cannot read a damaged history.
func (e *Engine) Salvage(ctx context.Context, runID string) (*Salvaged, error) {
	rs, ok := e.store.(repairStore)
	if !ok {
		return nil, fmt.Errorf("%w: this event store cannot read a damaged history", errors.ErrUnsupported)
	}
	sv, err := rs.Salvage(ctx, runID)
	if err != nil {
		return nil, err
	}
	if sv.Last == 0 {
		return nil, fmt.Errorf("%w: run %q", core.ErrNotFound, runID)
	}
	out := &Salvaged{Damage: sv.Damage, Last: sv.Last}
	s := core.New(runID)
	var hist []event.Envelope
	for _, c := range sv.Commits {
		if err := s.ApplyAll(c.Events); err != nil {
			out.Damage = fmt.Errorf("the commit at stream message %d breaks the history: %w", c.Pos, err)
			if s, err = core.Project(runID, hist); err != nil {
				return nil, fmt.Errorf("projecting the valid prefix of run %q: %w", runID, err)
			}
			break
		}
		hist = append(hist, c.Events...)
		out.Pos = c.Pos
	}
	if len(hist) > 0 {
		out.Snapshot, out.History = s, hist
	}
	return out, nil
}

// AcceptDamage says how to release a damaged run.
type AcceptDamage struct {
	// Reason says what was damaged (the quarantine's reason). Empty: what Salvage finds, and
	// ErrNotDamaged when it finds nothing.
	Reason string
	// By names the operation, as run.damage_accepted records it.
	By string
	// Terminate ends the run as failed, with TerminateReason, in the same commit. A run whose
	// valid prefix has ended is released as it ended.
	Terminate       bool
	TerminateReason string
}

// repairAttempts bounds the salvages AcceptDamage makes while other writers append.
const repairAttempts = 5

// AcceptDamage releases run runID, whose stored history is damaged: it appends, after the run's
// last message, one commit holding run.damage_accepted, which voids the messages after the
// history's longest valid prefix, and, with opts.Terminate, the run's termination. The run goes
// on from the prefix. It returns the run's snapshot after the commit. A run whose first commit
// is not valid cannot go on from anything: an error wrapping core.ErrInvalidHistory. The
// history service lifts the run's quarantine when it applies the commit.
func (e *Engine) AcceptDamage(ctx context.Context, runID string, opts AcceptDamage) (*core.Snapshot, error) {
	rs, ok := e.store.(repairStore)
	if !ok {
		return nil, fmt.Errorf("%w: this event store cannot release a damaged history", errors.ErrUnsupported)
	}
	for attempt := 1; ; attempt++ {
		sv, err := e.Salvage(ctx, runID)
		if err != nil {
			return nil, err
		}
		reason := opts.Reason
		switch {
		case sv.Snapshot == nil:
			stream, subject := e.store.(repairStore).Where(runID)
			return nil, fmt.Errorf("%w: run %q: not even its first commit is valid (%v), so there is nothing it can go on from; "+
				"inspect its subject (nats stream view %s --subject %s) and start the work again under another run ID",
				core.ErrInvalidHistory, runID, sv.Damage, stream, subject)
		case reason == "" && sv.Damage == nil:
			return nil, fmt.Errorf("%w: run %q", ErrNotDamaged, runID)
		case reason == "":
			reason = sv.Damage.Error()
		}
		s := sv.Snapshot
		expected := s.Seq
		t := e.now(s)
		payloads := []event.Payload{&event.RunDamageAccepted{Reason: reason, By: opts.By, After: sv.Pos, Through: sv.Last}}
		if err := s.Apply(event.Envelope{RunID: runID, Seq: expected + 1, Time: t, Payload: payloads[0]}); err != nil {
			return nil, fmt.Errorf("engine bug: run.damage_accepted breaks the history: %w", err)
		}
		if opts.Terminate && !s.Terminal() {
			ending, err := core.Terminate(s, opts.TerminateReason)
			if err != nil {
				return nil, err
			}
			payloads = append(payloads, ending...)
			if err := e.applyCommitted(s, expected+2, t, ending); err != nil {
				return nil, err
			}
		}
		events := make([]event.Event, len(payloads))
		for i, p := range payloads {
			events[i] = event.Event{Time: t, Payload: p}
		}
		_, err = rs.AppendRepair(ctx, runID, expected, sv.Last, events...)
		countAppend(ctx, err)
		if errors.Is(err, store.ErrConflict) && attempt < repairAttempts {
			continue // written to meanwhile: read it again
		}
		if err != nil {
			return nil, err
		}
		e.cache.drop(runID)
		e.logger.WarnContext(ctx, "released a run whose history was damaged", slog.String("run_id", runID), slog.String("by", opts.By),
			slog.Uint64("valid_through", expected), slog.String("reason", reason))
		return s, nil
	}
}

// isDamage reports whether err says a run's stored history is damaged: quarantined, not read
// back whole, or breaking the history's invariants.
func isDamage(err error) bool {
	return errors.Is(err, store.ErrDamaged) || errors.Is(err, event.ErrMalformed) || errors.Is(err, core.ErrInvalidHistory)
}

// terminateDamaged ends run runID, whose history err says is damaged, from its longest valid
// prefix (AcceptDamage). It returns err when the store cannot release damaged histories.
func (e *Engine) terminateDamaged(ctx context.Context, runID, reason string, err error) error {
	var de *store.DamagedError
	why := ""
	if errors.As(err, &de) {
		why = de.Reason
	}
	_, rerr := e.AcceptDamage(ctx, runID, AcceptDamage{Reason: why, By: "terminate", Terminate: true, TerminateReason: reason})
	switch {
	case errors.Is(rerr, errors.ErrUnsupported):
		return err
	case errors.Is(rerr, ErrNotDamaged):
		// Repaired meanwhile: terminate it as any run.
		_, rerr = e.forward(ctx, runID, func(s *core.Snapshot) ([]event.Payload, error) { return core.Terminate(s, reason) })
	}
	return rerr
}
