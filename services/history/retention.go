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
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/payload/objstore"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/internal/wait"
	"github.com/flowrun/flow/pkg/event"
)

// Retention: the history of an ended run is deleted once its definition's retention period
// (flow.WithRetention, else Config.Retention) has passed since its end. One replica sweeps, the
// one holding the retention lease in FLOW_LEASES. For each run past its period, the sweeper:
//
//  1. reads the run's whole history and checks that it ended (the index entry alone is not
//     trusted: a run that has not ended is never touched, whatever its age);
//  2. archives it, if an archive is configured (fault point retention-after-archive);
//  3. writes the run's tombstone in the runs index, compare-and-set on the entry's revision:
//     the summary with Deleted set, naming the archive (retention-after-tombstone);
//  4. deletes the run's derived state (timer entries, hook tokens, its parked and queue
//     entries, its start keys) and purges its subject from FLOW_HISTORY
//     (retention-after-purge);
//  5. marks the tombstone purged.
//
// A crash between any two steps is repaired by the next pass: before step 3 the run is still
// listed as it was and is archived again (the archive is overwritten); after it, the tombstone
// is not marked purged, so the next pass finishes steps 4 and 5 (each idempotent). A run is
// never hidden from listings before its archive exists, and its tombstone always says where the
// archive is.

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
	timers  jetstream.KeyValue
	hooks   jetstream.KeyValue
	queue   jetstream.KeyValue
	leases  jetstream.KeyValue
	history jetstream.Stream
	keys    *jshost.StartKeys
	// checkpoints holds the runs' snapshot checkpoints, deleted with their histories.
	checkpoints *objstore.Checkpoints
	// name is this replica's name in the lease.
	name string
}

func openRetention(ctx context.Context, js jetstream.JetStream, cfg Config) (*retention, error) {
	r := &retention{}
	var err error
	if r.archive, err = archive.Open(ctx, js, cfg.Archive); err != nil {
		return nil, fmt.Errorf("history: FLOW_ARCHIVE: %w", err)
	}
	for name, kv := range map[string]*jetstream.KeyValue{streams.TimersBucket: &r.timers, streams.HooksBucket: &r.hooks,
		streams.QueueBucket: &r.queue, streams.LeasesBucket: &r.leases} {
		if *kv, err = js.KeyValue(ctx, name); err != nil {
			return nil, fmt.Errorf("opening bucket %s: %w", name, err)
		}
	}
	if r.history, err = js.Stream(ctx, streams.History); err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", streams.History, err)
	}
	if r.keys, err = jshost.NewStartKeys(ctx, js); err != nil {
		return nil, err
	}
	if r.checkpoints, err = objstore.OpenCheckpoints(ctx, js, streams.CheckpointsBucket); err != nil {
		return nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r.name = "history-" + hex.EncodeToString(b)
	return r, nil
}

// startRetention runs the sweeper, under the retention lease, unless it is disabled.
func (s *Service) startRetention(ctx context.Context) {
	if s.cfg.RetentionSweep < 0 {
		return
	}
	s.workers.Go(func() { s.runRetention(ctx) })
}

// runRetention competes for the retention lease and sweeps every Config.RetentionSweep while it
// holds it, until ctx ends. A sweeper that loses its lease stops sweeping at once; two that
// overlap for a moment cannot both delete a run wrongly, since each step is idempotent and the
// tombstone is a compare-and-set.
func (s *Service) runRetention(ctx context.Context) {
	r := s.retention
	for ctx.Err() == nil {
		renew := s.leaseRenew(ctx)
		rev, err := r.leases.Create(ctx, streams.RetentionLease, []byte(r.name))
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				s.logger.Warn("cannot reach the lease bucket", slog.String("error", err.Error()))
			}
			wait.For(ctx, renew)
			continue
		}
		s.logger.Info("the retention sweeper leads")
		s.leadRetention(ctx, rev, renew)
	}
}

func (s *Service) leadRetention(ctx context.Context, rev uint64, renew time.Duration) {
	r := s.retention
	defer func() {
		rctx, stop := context.WithTimeout(context.Background(), time.Second)
		defer stop()
		_ = r.leases.Delete(rctx, streams.RetentionLease, jetstream.LastRevision(rev))
	}()
	next := time.Now()
	for {
		if !time.Now().Before(next) {
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("a retention sweep stopped short; the next one continues", slog.String("error", err.Error()))
			}
			next = time.Now().Add(s.cfg.RetentionSweep)
		}
		if !wait.For(ctx, min(renew, time.Until(next))) {
			return
		}
		nrev, err := r.leases.Update(ctx, streams.RetentionLease, []byte(r.name), rev)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("lost the retention lease", slog.String("error", err.Error()))
			}
			return
		}
		rev = nrev
	}
}

// leaseRenew returns how often a lease of FLOW_LEASES must be renewed: a third of its TTL.
func (s *Service) leaseRenew(ctx context.Context) time.Duration {
	ttl := cmp.Or(s.cfg.Streams.LeaseTTL, 10*time.Second)
	if st, err := s.retention.leases.Status(ctx); err == nil && st.TTL() > 0 {
		ttl = st.TTL()
	}
	return max(ttl/3, 100*time.Millisecond)
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
	key := streams.DefinitionKey(sum.Queue, sum.Definition)
	if d, ok := periods[key]; ok {
		return d
	}
	d := s.cfg.Retention
	if e, err := s.defs.Get(ctx, key); err == nil {
		var def streams.Definition
		if json.Unmarshal(e.Value(), &def) == nil && def.Retention > 0 {
			d = time.Duration(def.Retention)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		// Unknown: keep the run this sweep rather than apply a default that may be shorter.
		return time.Duration(1<<63 - 1)
	}
	periods[key] = d
	return d
}

// deleteRun deletes run runID if it is due, or finishes its deletion, and reports whether the
// run is deleted now.
func (s *Service) deleteRun(ctx context.Context, runID string, now time.Time, periods map[string]time.Duration) (bool, error) {
	r := s.retention
	cur, rev, err := s.readEntry(ctx, runID)
	if err != nil || rev == 0 {
		return false, err
	}
	hist, err := s.store.Load(ctx, runID, 0)
	if err != nil {
		s.logger.Warn("retention: a run past its period is kept: its history does not read back", slog.String("run_id", runID), slog.String("error", err.Error()))
		return false, nil
	}
	var snap *core.Snapshot
	if len(hist) > 0 {
		if snap, err = core.Project(runID, hist); err != nil {
			s.logger.Warn("retention: a run past its period is kept: its history does not project", slog.String("run_id", runID), slog.String("error", err.Error()))
			return false, nil
		}
		if !snap.Status.Terminal() {
			// Never touch a run that has not ended, whatever its index entry says.
			s.logger.Warn("retention: a run whose index entry says it ended has not ended; it is kept", slog.String("run_id", runID), slog.String("status", string(snap.Status)))
			return false, nil
		}
	}
	if cur.Deleted == nil {
		period := s.retentionOf(ctx, cur, periods)
		if !cur.Status.Terminal() || now.Before(cur.UpdatedAt.Add(period)) || snap == nil {
			return false, nil
		}
		msgs, err := s.storedMsgs(ctx, runID)
		if err != nil {
			return false, err
		}
		tomb := cur
		tomb.Deleted = &core.Deletion{At: now, Reason: fmt.Sprintf("retention %s passed since the run ended at %s", period, cur.UpdatedAt.UTC().Format(time.RFC3339)),
			Msgs: msgs}
		if r.archive != nil {
			if tomb.Deleted.Archive, err = r.archive.Put(ctx, runID, hist); err != nil {
				return false, err
			}
		}
		if err := s.cfg.Faults.Hit(fault.RetentionAfterArchive); err != nil {
			return false, err
		}
		rev, err = s.putEntry(ctx, tomb, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, nil // the entry changed meanwhile: the next sweep decides again
		}
		if err != nil {
			return false, err
		}
		if err := s.cfg.Faults.Hit(fault.RetentionAfterTombstone); err != nil {
			return false, err
		}
		cur = tomb
	}
	if snap != nil {
		if err := s.purgeRun(ctx, snap); err != nil {
			return false, err
		}
	}
	if err := s.cfg.Faults.Hit(fault.RetentionAfterPurge); err != nil {
		return false, err
	}
	cur.Deleted.Purged = true
	if _, err := s.putEntry(ctx, cur, rev); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return false, err
	}
	return true, nil
}

// purgeRun deletes what keys run snap outside its history, then its history.
func (s *Service) purgeRun(ctx context.Context, snap *core.Snapshot) error {
	r := s.retention
	runID := snap.RunID
	keys, err := r.timers.ListKeysFiltered(ctx, runID+".>")
	if err != nil {
		return fmt.Errorf("listing the timers of run %q: %w", runID, err)
	}
	for k := range keys.Keys() {
		if err := r.timers.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("deleting timer %s: %w", k, err)
		}
	}
	for _, h := range snap.Hooks {
		if err := deleteIfNames(ctx, r.hooks, h.Token, runID); err != nil {
			return fmt.Errorf("deleting the hook token of run %q: %w", runID, err)
		}
	}
	for _, kv := range []jetstream.KeyValue{s.parked, r.queue} {
		if err := kv.Delete(ctx, runID); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("deleting run %q from %s: %w", runID, kv.Bucket(), err)
		}
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
	if err := r.checkpoints.Delete(ctx, runID); err != nil {
		return err
	}
	if err := r.history.Purge(ctx, jetstream.WithPurgeSubject(streams.HistorySubject(runID))); err != nil {
		return fmt.Errorf("purging the history of run %q: %w", runID, err)
	}
	return nil
}

// storedMsgs returns how many messages FLOW_HISTORY holds on run runID's subject.
func (s *Service) storedMsgs(ctx context.Context, runID string) (uint64, error) {
	subject := streams.HistorySubject(runID)
	info, err := s.retention.history.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("counting the messages of run %q: %w", runID, err)
	}
	return info.State.Subjects[subject], nil
}

// purgedMsgs returns how many FLOW_HISTORY messages the tombstones in the runs index account
// for: the start check's measure of the stream's gaps the sweeper made.
func (s *Service) purgedMsgs() uint64 {
	var n uint64
	for _, sum := range s.index.where(func(sum core.Summary) bool { return sum.Deleted != nil }) {
		n += sum.Deleted.Msgs
	}
	return n
}

// deleteIfNames deletes hook token's entry if it routes to run runID.
func deleteIfNames(ctx context.Context, kv jetstream.KeyValue, token, runID string) error {
	e, err := kv.Get(ctx, token)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil
	}
	if err != nil {
		return err
	}
	var route struct {
		RunID string `json:"run_id"`
	}
	if json.Unmarshal(e.Value(), &route) != nil || route.RunID != runID {
		return nil
	}
	err = kv.Delete(ctx, token, jetstream.LastRevision(e.Revision()))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	return nil
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
	i, _ := slices.BinarySearchFunc(hist, after+1, func(e event.Envelope, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	return hist[i:], nil
}
