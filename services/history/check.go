package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/pkg/event"
)

// check runs at start, before the service consumes. It brings the runs index's damage marks in
// line with FLOW_DAMAGED (showQuarantine), then looks for damage in the history stream
// (messages lost by a disk or a server crash: Flow never deletes history, so any gap, a first
// sequence after 1, or a last sequence below what the history consumer already applied is
// loss), and checks the runs index against the stream. What it finds is repaired by a sweep
// over every run: damaged runs are quarantined, and the runs index, the timer index, hook
// routes, child starts, end-of-run work and resume tasks are derived again from history.
func (s *Service) check(ctx context.Context) error {
	if err := s.showQuarantine(ctx); err != nil {
		return err
	}
	lostUpTo := make([]uint64, s.layout.Partitions()) // by partition, the last stream sequence known lost
	var lost []string
	var msgs, subjects, pending uint64
	for p := range lostUpTo {
		pl, upTo, st, pend, err := s.checkPartition(ctx, p)
		if err != nil {
			return err
		}
		if len(pl) > 0 {
			lost = append(lost, "stream "+s.layout.Stream(p)+" lost data: "+strings.Join(pl, "; "))
		}
		lostUpTo[p] = upTo
		msgs, subjects, pending = msgs+st.Msgs, subjects+st.NumSubjects, pending+pend
	}

	var why []string
	switch {
	case s.cfg.Rebuild:
		why = append(why, "asked to rebuild")
	case len(lost) > 0:
		why = append(why, strings.Join(lost, "; "))
	case s.index.len() == 0 && msgs > 0:
		why = append(why, "the runs index is empty")
	case uint64(s.index.len())+pending < subjects:
		why = append(why, fmt.Sprintf("the runs index lists %d runs, the history holds %d", s.index.len(), subjects))
	}
	if len(why) == 0 {
		return nil
	}
	if len(lost) > 0 {
		s.logger.ErrorContext(ctx, "the history is damaged; checking every run", slog.String("damage", strings.Join(lost, "; ")))
	} else {
		s.logger.WarnContext(ctx, "rebuilding from history", slog.String("why", strings.Join(why, "; ")))
	}
	return s.sweep(ctx, lostUpTo, len(lost) > 0)
}

// checkPartition looks for loss in history partition p's stream. It returns what was lost, the
// last stream sequence known lost, the stream's state, and the commits the history consumer
// has yet to apply.
func (s *Service) checkPartition(ctx context.Context, p int) (lost []string, lostUpTo uint64, state jetstream.StreamState, pending uint64, err error) {
	name := s.layout.Stream(p)
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, 0, state, 0, fmt.Errorf("reading stream %s: %w", name, err)
	}
	info, err := st.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return nil, 0, state, 0, fmt.Errorf("reading the state of stream %s: %w", name, err)
	}
	state = info.State
	var floor uint64
	if ci, err := s.js.Consumer(ctx, name, streams.HistoryConsumer); err == nil {
		if cinfo, err := ci.Info(ctx); err == nil {
			floor, pending = cinfo.AckFloor.Stream, cinfo.NumPending+uint64(cinfo.NumAckPending)
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, 0, state, 0, fmt.Errorf("reading the history consumer of stream %s: %w", name, err)
	}

	if state.Lost != nil && len(state.Lost.Msgs) > 0 {
		lost = append(lost, fmt.Sprintf("the server reports %d message(s) lost (%d bytes)", len(state.Lost.Msgs), state.Lost.Bytes))
		lostUpTo = max(lostUpTo, slices.Max(state.Lost.Msgs))
	}
	// Interior gaps only: an empty stream reports odd deleted details.
	deleted := slices.DeleteFunc(slices.Clone(state.Deleted), func(seq uint64) bool { return seq <= state.FirstSeq || seq >= state.LastSeq })
	// The retention sweeper deletes the histories of runs past their retention, leaving a
	// tombstone that counts their messages: gaps it accounts for are not loss (retention.go).
	gaps := uint64(len(deleted))
	if state.Msgs > 0 && state.FirstSeq > 1 {
		gaps += state.FirstSeq - 1
	}
	firstSeq := state.FirstSeq
	if gaps > 0 && gaps <= s.purgedMsgs(p) {
		deleted = nil
		firstSeq = 1
	}
	if len(deleted) > 0 && state.Msgs > 0 {
		lost = append(lost, fmt.Sprintf("%d message(s) missing between stream sequences %d and %d", len(deleted), slices.Min(deleted), slices.Max(deleted)))
		lostUpTo = max(lostUpTo, slices.Max(deleted))
	}
	if state.Msgs > 0 && firstSeq > 1 {
		lost = append(lost, fmt.Sprintf("stream sequences 1 to %d are missing", firstSeq-1))
		lostUpTo = max(lostUpTo, firstSeq-1)
	}
	if floor > state.LastSeq {
		lost = append(lost, fmt.Sprintf("the history service had applied up to stream sequence %d, but the stream ends at %d", floor, state.LastSeq))
		lostUpTo = max(lostUpTo, floor)
	}
	return lost, lostUpTo, state, pending, nil
}

// sweepConcurrency bounds the runs a sweep reads at once.
const sweepConcurrency = 8

// sweep derives everything that follows from history again, for every run the stream holds:
// it applies each run's whole history as one commit (timers, children, end-of-run work, a
// resume task for an input nothing answered) and rewrites its index entry. It quarantines runs
// whose history is damaged: one that does not read back whole, one shorter than its index entry
// says, one whose index entry has no history left, and, when a stream lost messages (damaged
// is set), every run that had not ended by the last lost stream sequence of its partition
// (lostUpTo, by partition), which may have lost events there.
func (s *Service) sweep(ctx context.Context, lostUpTo []uint64, damaged bool) error {
	var runs []string
	for p, name := range s.layout.Streams() {
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.layout.Filter(p)))
		if err != nil {
			return fmt.Errorf("listing the runs of stream %s: %w", name, err)
		}
		for subject := range info.State.Subjects {
			if runID, ok := s.layout.RunOf(subject); ok {
				runs = append(runs, runID)
			}
		}
	}
	slices.Sort(runs)

	var mu sync.Mutex
	var quarantined []string
	var firstErr error
	sem := make(chan struct{}, sweepConcurrency)
	var wg sync.WaitGroup
	for _, runID := range runs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			reason, err := s.sweepRun(ctx, runID, lostUpTo[s.layout.Partition(runID)], damaged)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("sweeping run %q: %w", runID, err)
			}
			if reason != "" {
				quarantined = append(quarantined, runID)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	// Runs the index knows whose history is gone altogether.
	have := map[string]bool{}
	for _, id := range runs {
		have[id] = true
	}
	for _, sum := range s.index.where(func(sum core.Summary) bool { return !have[sum.RunID] && sum.Damaged == "" && sum.Deleted == nil }) {
		reason := fmt.Sprintf("stream %s holds none of its events, but the runs index recorded it %s at seq %d", s.layout.StreamOf(sum.RunID), sum.Status, sum.Seq)
		if err := s.quarantine(ctx, sum.RunID, reason); err != nil {
			return err
		}
		quarantined = append(quarantined, sum.RunID)
	}
	slices.Sort(quarantined)
	if len(quarantined) > 0 {
		s.logger.ErrorContext(ctx, "runs quarantined: their history is damaged; Flow will not drive or serve them until an operator accepts the damage (flow resume RUN --accept-damage) or restores the stream",
			slog.Int("runs", len(quarantined)), slog.Any("run_ids", quarantined))
	}
	s.logger.InfoContext(ctx, "sweep done", slog.Int("runs", len(runs)), slog.Int("quarantined", len(quarantined)))
	return nil
}

// sweepRun derives run runID's consequences from its whole history. It returns the reason it
// quarantined the run, if it did.
func (s *Service) sweepRun(ctx context.Context, runID string, lostUpTo uint64, damaged bool) (string, error) {
	if _, quarantined := s.store.Damage(runID); quarantined {
		return "", nil
	}
	hist, err := s.store.LoadAtLeast(ctx, runID, 0, 0)
	if errors.Is(err, store.ErrDeleted) {
		// Deleted after its retention period: its tombstone and what is left of the deletion
		// follow from its run.deleted.
		return "", s.finishDeletion(ctx, runID)
	}
	var snap *core.Snapshot
	if err == nil {
		snap, err = core.Project(runID, hist)
	}
	var he *core.HistoryError
	entry, indexed := s.index.get(runID)
	reason := ""
	switch {
	case errors.Is(err, event.ErrMalformed) || errors.As(err, &he):
		reason = fmt.Sprintf("stream %s: %v", s.layout.StreamOf(runID), err)
	case err != nil:
		return "", err
	case indexed && entry.Seq > snap.Seq:
		reason = fmt.Sprintf("stream %s holds %d events, but the runs index recorded it %s at seq %d", s.layout.StreamOf(runID), snap.Seq, entry.Status, entry.Seq)
	case damaged && !snap.Terminal():
		if _, streamSeq, ok := s.store.Position(runID); ok && streamSeq < lostUpTo {
			reason = fmt.Sprintf("stream %s lost messages up to stream sequence %d, and the run had not ended by then: it may have lost events", s.layout.StreamOf(runID), lostUpTo)
		}
	}
	if reason != "" {
		if err := s.quarantine(ctx, runID, reason); err != nil {
			return "", err
		}
		return reason, nil
	}
	s.registerHooks(ctx, snap)
	if err := s.engine.ApplyCommit(ctx, snap, hist); err != nil {
		return "", err
	}
	if err := s.control.apply(ctx, snap, hist); err != nil {
		return "", err
	}
	return "", s.writeIndex(ctx, runID, &followed{s: snap})
}

// registerHooks routes the tokens of the hooks run snap.RunID waits on to it again, taking
// them over from runs that ended (a reset's old run).
func (s *Service) registerHooks(ctx context.Context, snap *core.Snapshot) {
	if snap.Terminal() {
		return
	}
	for _, h := range snap.Hooks {
		if !h.Received {
			if err := s.engine.ClaimHook(ctx, h.Token, snap.RunID, h.ID); err != nil {
				s.logger.WarnContext(ctx, "a hook token routes elsewhere", slog.String("run_id", snap.RunID), slog.String("hook_id", h.ID), slog.String("error", err.Error()))
			}
		}
	}
}

// quarantine records run runID as damaged, with reason: every store refuses to serve it from
// then on, and its index entry says why. FLOW_DAMAGED decides; the index entry follows it, and
// is brought in line at start (showQuarantine) if the service dies between the two writes.
func (s *Service) quarantine(ctx context.Context, runID, reason string) error {
	if err := s.damaged.Mark(ctx, jsstore.Damaged{RunID: runID, Reason: reason, DetectedAt: time.Now().UTC()}); err != nil {
		return fmt.Errorf("quarantining run %q: %w", runID, err)
	}
	s.store.Quarantine(runID, reason)
	s.logger.Error("run history damaged; the run is quarantined", slog.String("run_id", runID), slog.String("reason", reason))
	return s.showDamage(ctx, runID, reason)
}

// showQuarantine brings the runs index in line with FLOW_DAMAGED: every quarantined run's entry
// says why, and no other entry says it is damaged.
func (s *Service) showQuarantine(ctx context.Context) error {
	damaged := s.store.Damaged()
	for runID, reason := range damaged {
		if sum, ok := s.index.get(runID); !ok || sum.Damaged != reason {
			if err := s.showDamage(ctx, runID, reason); err != nil {
				return err
			}
		}
	}
	for _, sum := range s.index.where(func(sum core.Summary) bool { _, ok := damaged[sum.RunID]; return sum.Damaged != "" && !ok }) {
		if err := s.showDamage(ctx, sum.RunID, ""); err != nil {
			return err
		}
	}
	return nil
}
