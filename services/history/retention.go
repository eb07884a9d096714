package history

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/internal/maintenance"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/timerindex"
	"github.com/flowrun/flow/pkg/event"
)

// Retention: the history of an ended run is deleted once its definition's retention period
// (flow.WithRetention, else Config.Retention) has passed since its end. One replica sweeps, the
// one holding the retention lease in FLOW_LEASES. For each run past its period, the sweeper:
//
//  1. reads the run's whole history and checks that it ended and that this service has applied
//     every commit of it (the index entry names the history's last event): a run that has not
//     ended is never touched, whatever its age, and no consequence of a commit is left undone;
//  2. archives it, if an archive is configured, with the offloaded payloads its events refer
//     to, read from FLOW_PAYLOADS, so that the deleted run needs nothing the payload collector
//     may delete (payload_gc.go) (fault point retention-after-archive);
//  3. records the deletion: run.deleted, appended right after the history's last event by
//     optimistic concurrency, so that anything appended meanwhile (a reset) makes it fail and
//     the next pass decides again; it names the archive, counts the commits to purge and keeps
//     the run's summary. This is the deletion's commit point: from here every read of the run
//     answers store.ErrDeleted, and its ID is never taken again (the record stays);
//  4. finishes the deletion (finishDeletion, which the history service also does when it
//     applies the commit holding run.deleted, and at start for every deleted run): the
//     tombstone in the runs index (retention-after-tombstone), the run's derived state (timer
//     entries, hook tokens, its parked and queue entries, its start keys, its checkpoint), the
//     purge of its events before run.deleted from FLOW_HISTORY, bounded by the record's stream
//     sequence (retention-after-purge), then the tombstone marked purged.
//
// A crash between any two steps is repaired: before step 3 the run is still listed as it was
// and is archived again on the next pass (the archive is overwritten); after it, the history
// service finishes step 4 (each part idempotent). A run is never hidden from listings before its
// archive exists, its tombstone always says where the archive is, and the stream never loses a
// message the archive does not hold.

// DefaultRetention is Config.Retention's default.
const DefaultRetention = 30 * 24 * time.Hour

// defaultRetentionSweep is Config.RetentionSweep's default.
const defaultRetentionSweep = time.Minute

// maxSweep bounds the runs one pass deletes; the next pass continues.
const maxSweep = 1000

func retentionDefaults(cfg *Config) error {
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.RetentionSweep == 0 {
		cfg.RetentionSweep = defaultRetentionSweep
	}
	if cfg.Archive == "" {
		cfg.Archive = archive.ObjectStore
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Retention < 0 {
		return fmt.Errorf("history: Retention must be positive, got %s", cfg.Retention)
	}
	return nil
}

// retention is the sweeper's state.
type retention struct {
	archive archive.Archive
	timers  *timerindex.Index
	hooks   *jshost.HookRoutes
	queue   *limits.Queue
	leases  *maintenance.Leases
	keys    *jshost.StartKeys
	// checkpoints holds the runs' snapshot checkpoints, deleted with their histories.
	checkpoints *objstore.Checkpoints
	// payloads is FLOW_PAYLOADS: the archive of a deleted run takes the payloads it refers to
	// from it, and the payload collector deletes from it (payload_gc.go).
	payloads *objstore.Store
	// name is this replica's name in the lease.
	name string
}

func openRetention(ctx context.Context, js jetstream.JetStream, cfg Config) (*retention, error) {
	r := &retention{}
	var err error
	if r.archive, err = archive.Open(ctx, js, cfg.Archive); err != nil {
		return nil, fmt.Errorf("history: FLOW_ARCHIVE: %w", err)
	}
	if r.hooks, err = jshost.OpenHookRoutes(ctx, js); err != nil {
		return nil, err
	}
	if r.timers, err = timerindex.Open(ctx, js); err != nil {
		return nil, err
	}
	if r.queue, err = limits.OpenQueue(ctx, js); err != nil {
		return nil, err
	}
	if r.leases, err = maintenance.OpenLeases(ctx, js); err != nil {
		return nil, err
	}
	if r.keys, err = jshost.NewStartKeys(ctx, js); err != nil {
		return nil, err
	}
	if r.checkpoints, err = objstore.OpenCheckpoints(ctx, js, streams.CheckpointsBucket); err != nil {
		return nil, err
	}
	if r.payloads, err = objstore.Open(ctx, js, streams.PayloadsBucket, 0); err != nil {
		return nil, err
	}
	r.payloads.SetCacheBytes(0) // each payload is read once, into an archive
	r.payloads.SetFaults(cfg.Faults)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r.name = "history-" + hex.EncodeToString(b)
	return r, nil
}

// startRetention runs the history service's background jobs, each a maintenance.Job run under
// its lease of FLOW_LEASES by the replica that holds it (internal/maintenance, as the
// scheduler's jobs are), unless it is disabled:
//
//   - the retention sweeper, under the retention lease, every Config.RetentionSweep: deletes
//     the ended runs past their retention period (Sweep). It alone purges FLOW_HISTORY, which
//     the history role alone may do (internal/natsperm), so it is hosted here;
//   - the reconciler (reconcile.go), under the reconcile lease, every Config.ReconcileInterval:
//     repairs the state derived from history;
//   - the payload collector (payload_gc.go), under the payloads lease, every
//     Config.PayloadGCInterval: deletes the payloads no run refers to.
//
// Each pass's writes are idempotent or compare-and-set, so two replicas that overlap for a
// moment (one that lost its lease and has not seen it yet) are harmless; a replica that loses its
// lease stops its pass at once.
func (s *Service) startRetention(ctx context.Context) {
	if s.cfg.RetentionSweep >= 0 {
		s.runLeased(ctx, streams.RetentionLease, "the retention sweeper", maintenance.Periodic(s.cfg.RetentionSweep, func(ctx context.Context) {
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("a retention sweep stopped short; the next one continues", slog.String("error", err.Error()))
			}
		}))
	}
	if s.cfg.ReconcileInterval > 0 {
		s.runLeased(ctx, streams.ReconcileLease, "the reconciler", maintenance.Periodic(s.cfg.ReconcileInterval, func(ctx context.Context) {
			if _, err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("a reconciliation stopped short; the next one continues", slog.String("error", err.Error()))
			}
			s.spreadLeaders(ctx)
		}))
	}
	if s.cfg.PayloadGCInterval > 0 {
		s.runLeased(ctx, streams.PayloadsLease, "the payload collector", maintenance.Periodic(s.cfg.PayloadGCInterval, func(ctx context.Context) {
			_, _ = s.CollectPayloads(ctx) // it logs what it did, and why it stopped short
		}))
	}
}

// runLeased runs job under lease key, on the service's workers, until ctx ends.
func (s *Service) runLeased(ctx context.Context, key, role string, job maintenance.Job) {
	l := &maintenance.Lease{Leases: s.retention.leases, Key: key, Holder: s.retention.name, Role: role, Doing: "running " + role,
		TTL: cmp.Or(s.cfg.Streams.LeaseTTL, 10*time.Second), Backoff: time.Second, Logger: s.logger}
	s.workers.Go(func() { l.Run(ctx, job) })
}

// SweepReport says what one retention sweep did.
type SweepReport struct {
	// Deleted are the runs whose deletion the sweep finished, oldest end first.
	Deleted []string
	// Skipped counts the runs past their period the sweep left for later: their history did
	// not read back (damaged), or showed them not ended, or their entry changed meanwhile.
	Skipped int
}

// Sweep deletes the ended runs past their retention period now, by Config.Clock, and finishes
// the deletions an earlier sweep left half done. The sweeper calls it under its lease; tests
// call it directly.
func (s *Service) Sweep(ctx context.Context) (SweepReport, error) {
	now := s.cfg.Clock().UTC()
	periods := map[string]time.Duration{}
	due := s.index.where(func(sum core.Summary) bool {
		if sum.Deleted != nil {
			return !sum.Deleted.Purged
		}
		// A quarantined run is kept for an operator (flow resume --accept-damage releases it).
		return sum.Status.Terminal() && sum.Damaged == "" && !sum.UpdatedAt.IsZero() &&
			!now.Before(sum.UpdatedAt.Add(s.retentionOf(ctx, sum, periods)))
	})
	slices.SortFunc(due, func(a, b core.Summary) int {
		return cmp.Or(a.UpdatedAt.Compare(b.UpdatedAt), cmp.Compare(a.RunID, b.RunID))
	})
	var rep SweepReport
	for _, sum := range due[:min(len(due), maxSweep)] {
		done, err := s.deleteRun(ctx, sum.RunID, now, periods)
		if err != nil {
			return rep, fmt.Errorf("deleting run %q: %w", sum.RunID, err)
		}
		if done {
			rep.Deleted = append(rep.Deleted, sum.RunID)
		} else {
			rep.Skipped++
		}
	}
	if len(rep.Deleted) > 0 || rep.Skipped > 0 {
		s.logger.Info("retention sweep", slog.Int("deleted", len(rep.Deleted)), slog.Int("skipped", rep.Skipped))
	}
	return rep, nil
}

// retentionOf returns how long run sum is kept after its end: its definition's retention, as
// the latest registration in FLOW_DEFINITIONS says, else the default. periods caches the
// definitions read in one sweep.
func (s *Service) retentionOf(ctx context.Context, sum core.Summary, periods map[string]time.Duration) time.Duration {
	key := definitions.Key(sum.Queue, sum.Definition)
	if d, ok := periods[key]; ok {
		return d
	}
	d := s.cfg.Retention
	if def, found, err := s.defs.Get(ctx, sum.Queue, sum.Definition); err == nil {
		if found && def.Retention > 0 {
			d = time.Duration(def.Retention)
		}
	} else {
		// Unknown: keep the run this sweep rather than apply a default that may be shorter.
		return time.Duration(1<<63 - 1)
	}
	periods[key] = d
	return d
}

// deleteRun deletes run runID if it is due, or finishes its deletion, and reports whether the
// run is deleted now.
func (s *Service) deleteRun(ctx context.Context, runID string, now time.Time, periods map[string]time.Duration) (bool, error) {
	cur, rev, err := s.readEntry(ctx, runID)
	if err != nil || rev == 0 {
		return false, err
	}
	hist, err := s.store.Load(ctx, runID, 0)
	var de *store.DeletedError
	if errors.As(err, &de) {
		return true, s.finishDeletion(ctx, runID) // recorded: finish what is left
	}
	if err != nil {
		s.logger.Warn("retention: a run past its period is kept: its history does not read back", slog.String("run_id", runID), slog.String("error", err.Error()))
		return false, nil
	}
	if len(hist) == 0 {
		if cur.Deleted != nil {
			// Deleted before deletions were recorded in history: finish as it was begun.
			return true, s.finishLegacyDeletion(ctx, cur, rev)
		}
		return false, nil
	}
	snap, err := core.Project(runID, hist)
	if err != nil {
		s.logger.Warn("retention: a run past its period is kept: its history does not project", slog.String("run_id", runID), slog.String("error", err.Error()))
		return false, nil
	}
	switch period := s.retentionOf(ctx, cur, periods); {
	case !snap.Status.Terminal():
		// Never touch a run that has not ended, whatever its index entry says.
		s.logger.Warn("retention: a run whose index entry says it ended has not ended; it is kept", slog.String("run_id", runID), slog.String("status", string(snap.Status)))
		return false, nil
	case cur.Seq != snap.Seq:
		return false, nil // this service has not applied its last commit yet: the next pass decides
	case !cur.Status.Terminal() || now.Before(cur.UpdatedAt.Add(period)):
		return false, nil
	default:
		msgs, err := s.storedMsgs(ctx, runID)
		if err != nil {
			return false, err
		}
		d := &event.RunDeleted{Reason: fmt.Sprintf("retention %s passed since the run ended at %s", period, cur.UpdatedAt.UTC().Format(time.RFC3339)),
			Msgs: msgs}
		if d.Summary, err = json.Marshal(cur); err != nil {
			return false, err
		}
		if r := s.retention; r.archive != nil {
			if d.Archive, err = r.archive.Put(ctx, runID, hist, s.archivedPayload); err != nil {
				return false, err
			}
		}
		if err := s.cfg.Faults.Hit(fault.RetentionAfterArchive); err != nil {
			return false, err
		}
		if _, err := s.store.Append(ctx, runID, snap.Seq, event.Event{Time: now, Payload: d}); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return false, nil // appended to meanwhile (a reset): the next pass decides again
			}
			return false, fmt.Errorf("recording the deletion of run %q: %w", runID, err)
		}
	}
	return true, s.finishDeletion(ctx, runID)
}

// finishDeletion carries out what run runID's run.deleted implies, the deletion's steps after
// its record: the tombstone in the runs index, the run's derived state, the purge of its events
// before the record, and the tombstone marked purged. Idempotent; the history service calls it
// when it applies the record's commit, at start for a deleted run, and the sweeper as a fast
// path. It does nothing for a run whose deletion is not recorded.
func (s *Service) finishDeletion(ctx context.Context, runID string) error {
	hist, de, err := s.store.LoadDeleted(ctx, runID)
	if err != nil || de == nil {
		return err
	}
	tomb, err := core.Tombstone(runID, de.Seq, de.Time, de.Deletion)
	if err != nil {
		return err
	}
	var rev uint64
	for {
		cur, crev, err := s.readEntry(ctx, runID)
		if err != nil {
			return err
		}
		if cur.Deleted != nil && cur.Deleted.Purged {
			return nil
		}
		if cur.Deleted != nil && crev > 0 {
			tomb, rev = cur, crev // tombstoned already (by the sweeper, or by this service's consumer)
			break
		}
		rev, err = s.putEntry(ctx, tomb, crev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // written meanwhile: read it again
		}
		if err != nil {
			return err
		}
		break
	}
	if err := s.cfg.Faults.Hit(fault.RetentionAfterTombstone); err != nil {
		return err
	}
	if len(hist) > 0 {
		// The events before the record are still there: their derived state goes first.
		snap, err := core.Project(runID, hist)
		if err != nil {
			return fmt.Errorf("projecting the deleted run %q: %w", runID, err)
		}
		if err := s.purgeDerived(ctx, snap); err != nil {
			return err
		}
		hs, err := s.store.HistoryOf(ctx, runID)
		if err != nil {
			return fmt.Errorf("purging the history of run %q: %w", runID, err)
		}
		if err := hs.Purge(ctx, jetstream.WithPurgeSubject(s.layout.Subject(runID)), jetstream.WithPurgeSequence(de.StreamSeq)); err != nil {
			return fmt.Errorf("purging the history of run %q: %w", runID, err)
		}
	}
	if err := s.cfg.Faults.Hit(fault.RetentionAfterPurge); err != nil {
		return err
	}
	tomb.Deleted.Purged = true
	if _, err := s.putEntry(ctx, tomb, rev); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	return nil
}

// finishLegacyDeletion finishes a deletion begun before deletions were recorded in history
// (run.deleted): tombstoned, its subject purged or not. It marks the tombstone purged once the
// subject is empty.
func (s *Service) finishLegacyDeletion(ctx context.Context, cur core.Summary, rev uint64) error {
	cur.Deleted.Purged = true
	if _, err := s.putEntry(ctx, cur, rev); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	return nil
}

// purgeDerived deletes what keys run snap outside its history: its timer entries, hook tokens,
// parked and queue entries, start keys and checkpoint.
func (s *Service) purgeDerived(ctx context.Context, snap *core.Snapshot) error {
	r := s.retention
	runID := snap.RunID
	if err := r.timers.DeleteRun(ctx, runID); err != nil {
		return fmt.Errorf("deleting the timers of run %q: %w", runID, err)
	}
	for _, h := range snap.Hooks {
		if err := r.hooks.DeleteIfRoutes(ctx, h.Token, runID); err != nil {
			return fmt.Errorf("deleting the hook token of run %q: %w", runID, err)
		}
	}
	if err := s.parked.Delete(ctx, runID, 0); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("deleting run %q from %s: %w", runID, streams.ParkedBucket, err)
	}
	if err := r.queue.Delete(ctx, runID, 0); err != nil {
		return fmt.Errorf("deleting run %q from %s: %w", runID, streams.QueueBucket, err)
	}
	if p := snap.StartPolicy; p != nil {
		var startKeys []string
		if p.DedupKey != "" {
			startKeys = append(startKeys, engine.DedupIndexKey(snap.Spec.Definition, p.DedupKey))
		}
		if p.Debounce != nil {
			startKeys = append(startKeys, engine.DebounceIndexKey(snap.Spec.Definition, p.Debounce.Key))
		}
		for _, k := range startKeys {
			if err := r.keys.ReleaseKey(ctx, k, runID); err != nil {
				return err
			}
		}
	}
	return r.checkpoints.Delete(ctx, runID)
}

// storedMsgs returns how many messages the history holds on run runID's subject.
func (s *Service) storedMsgs(ctx context.Context, runID string) (uint64, error) {
	subject := s.layout.Subject(runID)
	hs, err := s.store.HistoryOf(ctx, runID)
	if err != nil {
		return 0, fmt.Errorf("counting the messages of run %q: %w", runID, err)
	}
	info, err := hs.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("counting the messages of run %q: %w", runID, err)
	}
	return info.State.Subjects[subject], nil
}

// purgedMsgs returns how many messages of history partition p the tombstones in the runs index
// account for: the start check's measure of the stream's gaps the sweeper made.
func (s *Service) purgedMsgs(p int) uint64 {
	var n uint64
	for _, sum := range s.index.where(func(sum core.Summary) bool { return sum.Deleted != nil && s.layout.Partition(sum.RunID) == p }) {
		n += sum.Deleted.Msgs
	}
	return n
}

// deletedError is the answer to a read of a run whose history was deleted and not archived.
func deletedError(sum core.Summary) error {
	msg := fmt.Sprintf("run %q was deleted at %s (%s) and not archived; its summary is listed by `flow runs --include-deleted`",
		sum.RunID, sum.Deleted.At.UTC().Format(time.RFC3339), sum.Deleted.Reason)
	return &deletedErr{msg: msg}
}

type deletedErr struct{ msg string }

func (e *deletedErr) Error() string { return e.msg }

// readArchived returns the archived history of tombstoned run sum after sequence after.
func (s *Service) readArchived(ctx context.Context, sum core.Summary, after uint64) ([]event.Envelope, error) {
	if sum.Deleted.Archive == "" {
		return nil, deletedError(sum)
	}
	hist, err := archive.Read(ctx, s.js, sum.Deleted.Archive)
	if errors.Is(err, archive.ErrNotArchived) {
		return nil, &deletedErr{msg: fmt.Sprintf("run %q was deleted at %s (%s); its archive %s is gone: %v",
			sum.RunID, sum.Deleted.At.UTC().Format(time.RFC3339), sum.Deleted.Reason, sum.Deleted.Archive, err)}
	}
	if err != nil {
		return nil, err
	}
	if rec, err := s.store.LastCommit(ctx, sum.RunID); err == nil && len(rec) == 1 && rec[0].Type() == event.TypeRunDeleted &&
		(len(hist) == 0 || rec[0].Seq == hist[len(hist)-1].Seq+1) {
		hist = append(hist, rec[0]) // the record of the deletion, which the stream keeps
	}
	i, _ := slices.BinarySearchFunc(hist, after+1, func(e event.Envelope, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	return hist[i:], nil
}

// spreadLeaders moves one partition's stream leadership to a server that leads fewer history
// streams, if one does (streams.SpreadLeaders): the reconciler's lease holder alone does it, once
// per pass, so that leaders move one at a time and no two replicas of the service disagree.
func (s *Service) spreadLeaders(ctx context.Context) {
	stream, to, err := streams.SpreadLeaders(ctx, s.js, s.layout)
	switch {
	case err != nil && ctx.Err() == nil:
		s.logger.Warn("spreading the history streams' leaders failed; the next reconciliation tries again", slog.String("error", err.Error()))
	case stream != "":
		s.logger.Info("moved a history stream's leadership to a server that led fewer of them", slog.String("stream", stream), slog.String("to", to))
	}
}
