package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/internal/payload/objstore"
)

// The payload collector (docs/large-payloads.md#collecting-payloads) deletes the offloaded
// payloads in FLOW_PAYLOADS that no retained history refers to. The replica holding the
// retention lease runs it every Config.PayloadGCInterval, beside the sweeper and the
// reconciler; it is the only writer that deletes from FLOW_PAYLOADS. A pass at time T0:
//
//  1. lists the objects and takes as candidates those last written or touched before
//     T0 - Config.PayloadGCGrace (and finishes the deletions an earlier pass left half done);
//  2. reads every message of FLOW_HISTORY, every run's, to its end, and collects the hashes
//     every payload field of every event refers to (payload.HashesIn; a message that does not
//     decode is searched as text). Deleted runs need none: their archives hold their payloads
//     (the sweeper writes them so; an archive written before that is rewritten with them first);
//  3. deletes each candidate no history refers to, if a fresh read of its metadata shows it not
//     written or touched since T0 - grace, conditionally on that metadata: a writer that
//     touches or writes it meanwhile makes the deletion fail, and the object is kept.
//
// Why no object a history needs is deleted: a writer puts (or touches) an object before it
// appends the event that refers to it, and appends within the grace period (the grace bounds
// that time). An object the pass deletes was last written at W < T0 - grace, so the event of
// that write was appended before T0, before the pass began to read the stream, which it reads
// to its end: the pass saw the event, unless the run was deleted first, after its archive took
// the payload. A write at or after the pass's fresh read changes the metadata, and the deletion
// conditional on it fails; one before it is older than the grace period only if its event was
// appended before T0. A reference copied from one history to another without a put (a child's
// output into its parent, a continue-as-new input into its successor) is appended while the
// source is retained, since the sweeper deletes a run only once every consequence of its
// commits is applied, and the pass reads the stream to its end, so it sees one or the other.

const (
	// DefaultPayloadGCInterval is Config.PayloadGCInterval's default.
	DefaultPayloadGCInterval = time.Hour
	// DefaultPayloadGCGrace is Config.PayloadGCGrace's default.
	DefaultPayloadGCGrace = time.Hour
	// MinPayloadGCGrace is the shortest grace period Config.PayloadGCGrace takes.
	MinPayloadGCGrace = time.Minute
)

func payloadGCDefaults(cfg *Config) error {
	if cfg.PayloadGCInterval == 0 {
		cfg.PayloadGCInterval = DefaultPayloadGCInterval
	}
	if cfg.PayloadGCGrace == 0 {
		cfg.PayloadGCGrace = DefaultPayloadGCGrace
	}
	if cfg.PayloadGCGrace < MinPayloadGCGrace {
		return fmt.Errorf("history: PayloadGCGrace must be at least %s (it bounds how long a writer may take from storing a payload to appending the event that refers to it), got %s",
			MinPayloadGCGrace, cfg.PayloadGCGrace)
	}
	return nil
}

// payloadGC is the collector's state between passes.
type payloadGC struct {
	// mu makes passes one at a time, and guards selfContained.
	mu sync.Mutex
	// selfContained holds the deleted runs whose archives this process found holding their
	// payloads (or gone): they are not looked at again.
	selfContained map[string]bool
}

// PayloadGCReport says what one pass of the payload collector did.
type PayloadGCReport struct {
	// Objects counts the objects FLOW_PAYLOADS held; Candidates those of them last written or
	// touched before the grace period.
	Objects, Candidates int
	// Referenced counts the candidates a retained history refers to: kept.
	Referenced int
	// Deleted are the objects deleted (their hex SHA-256), Bytes their total size.
	Deleted []string
	Bytes   uint64
	// Skipped counts the candidates no history refers to that were left: written or touched
	// again since they were listed (a writer offloads the same bytes), or gone already.
	Skipped int
	// Finished counts the deletions an earlier pass left half done that this one finished.
	Finished int
	// Upgraded counts the archives of deleted runs rewritten to hold their payloads (archives
	// written before archives held them).
	Upgraded int
	// Orphans counts the chunk subjects purged that no object named, older than the grace
	// period: uploads that failed or lost a race (objstore.Store.SweepChunks).
	Orphans int
}

// CollectPayloads runs one pass of the payload collector by Config.Clock and returns what it
// did. The replica that holds the retention lease calls it every PayloadGCInterval; tests call
// it directly. A pass that fails part way has deleted only objects no history refers to; the
// next pass goes on.
func (s *Service) CollectPayloads(ctx context.Context) (rep PayloadGCReport, err error) {
	g := &s.payloadGC
	g.mu.Lock()
	defer g.mu.Unlock()
	store := s.retention.payloads
	cutoff := s.cfg.Clock().UTC().Add(-s.cfg.PayloadGCGrace)
	defer func() { s.collected(ctx, rep, err) }()

	objs, err := store.Objects(ctx)
	if err != nil {
		return rep, err
	}
	var candidates []objstore.Object
	for _, o := range objs {
		if o.Deleted {
			finished, err := store.FinishDelete(ctx, o.Name)
			if err != nil {
				return rep, err
			}
			if finished {
				rep.Finished++
			}
			continue
		}
		rep.Objects++
		if o.ModTime.Before(cutoff) {
			candidates = append(candidates, o)
		}
	}
	if rep.Orphans, err = store.SweepChunks(ctx, cutoff); err != nil {
		return rep, err
	}
	rep.Candidates = len(candidates)
	if len(candidates) == 0 {
		return rep, nil
	}

	// Whatever was appended before the listing, and since, to the end of the stream.
	refs := map[string]bool{}
	if _, err := s.store.ScanAll(ctx, func(m *jetstream.RawStreamMsg) error {
		payload.HashesIn(m.Data, func(sum string) { refs[sum] = true })
		return ctx.Err()
	}); err != nil {
		return rep, fmt.Errorf("reading the references of every retained history: %w", err)
	}
	if rep.Upgraded, err = s.upgradeArchives(ctx, refs); err != nil {
		return rep, err
	}

	for _, o := range candidates {
		if refs[o.Name] {
			rep.Referenced++
			continue
		}
		size, deleted, err := store.DeleteUnchanged(ctx, o.Name, cutoff)
		if deleted {
			rep.Deleted = append(rep.Deleted, o.Name)
			rep.Bytes += size
		}
		if err != nil {
			return rep, err
		}
		if !deleted {
			rep.Skipped++
		}
	}
	return rep, nil
}

// collected counts a pass's deletions as repairs of FLOW_PAYLOADS and logs the pass. (A
// deletion is counted once, when it commits; finishing one is not counted again.)
func (s *Service) collected(ctx context.Context, rep PayloadGCReport, err error) {
	metrics.Repair(ctx, metrics.StatePayloads, len(rep.Deleted))
	if len(rep.Deleted) == 0 && rep.Finished == 0 && rep.Upgraded == 0 && rep.Orphans == 0 && err == nil {
		return
	}
	shown := rep.Deleted[:min(len(rep.Deleted), 20)]
	attrs := []any{slog.String("state", metrics.StatePayloads), slog.Int("deleted", len(rep.Deleted)), slog.Uint64("bytes", rep.Bytes),
		slog.Any("sha256", shown), slog.Int("referenced", rep.Referenced), slog.Int("skipped", rep.Skipped),
		slog.Int("finished", rep.Finished), slog.Int("archives_upgraded", rep.Upgraded), slog.Int("orphaned_chunks", rep.Orphans), slog.Duration("grace", s.cfg.PayloadGCGrace)}
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		s.logger.WarnContext(ctx, "a payload collection stopped short; the next one goes on", append(attrs, slog.String("error", err.Error()))...)
		return
	}
	s.logger.InfoContext(ctx, "offloaded payloads no retained history refers to deleted", attrs...)
}

// upgradeArchives makes sure that the archive of every deleted run holds the payloads its
// history refers to, before a pass deletes what no retained history refers to. An archive
// written before archives held payloads is rewritten with them, read from FLOW_PAYLOADS (where
// they still are: until this pass, no collector deleted them). One that cannot be rewritten now
// keeps the payloads it refers to (added to refs) until a pass manages. An archive that does
// not read for another reason stops the pass: which payloads it needs is unknown. It returns how
// many archives it rewrote.
func (s *Service) upgradeArchives(ctx context.Context, refs map[string]bool) (int, error) {
	g := &s.payloadGC
	if g.selfContained == nil {
		g.selfContained = map[string]bool{}
	}
	todo := s.index.where(func(sum core.Summary) bool {
		return sum.Deleted != nil && sum.Deleted.Archive != "" && !g.selfContained[sum.RunID]
	})
	n := 0
	for _, sum := range todo {
		where := sum.Deleted.Archive
		ok, err := archive.SelfContained(ctx, s.js, where)
		if errors.Is(err, archive.ErrNotArchived) {
			s.logger.WarnContext(ctx, "the archive of a deleted run is gone; the payloads only it referred to are collected",
				slog.String("run_id", sum.RunID), slog.String("archive", where))
			g.selfContained[sum.RunID] = true
			continue
		}
		if err != nil {
			return n, fmt.Errorf("the archive %s of deleted run %q does not read (%w); no payload is collected until it does, since which ones it needs is unknown",
				where, sum.RunID, err)
		}
		if ok {
			g.selfContained[sum.RunID] = true
			continue
		}
		c, err := archive.ReadAll(ctx, s.js, where)
		if err != nil {
			return n, fmt.Errorf("the archive %s of deleted run %q does not read (%w); no payload is collected until it does, since which ones it needs is unknown",
				where, sum.RunID, err)
		}
		if err := archive.Rewrite(ctx, s.js, where, c.History, s.archivedPayload); err != nil {
			s.logger.WarnContext(ctx, "an archive written before archives held payloads could not be rewritten with them; the payloads it refers to are kept",
				slog.String("run_id", sum.RunID), slog.String("archive", where), slog.String("error", err.Error()))
			for _, r := range payload.HistoryRefs(c.History) {
				refs[r.SHA256] = true
			}
			continue
		}
		g.selfContained[sum.RunID] = true
		n++
	}
	return n, nil
}

// archivedPayload reads payload r for the archive of a deleted run. A payload FLOW_PAYLOADS
// does not hold is lost already: it is logged and left out (nil), so that the archive keeps the
// reference alone rather than the run being kept forever.
func (s *Service) archivedPayload(ctx context.Context, r payload.Ref) ([]byte, error) {
	b, err := s.retention.payloads.Get(ctx, r)
	if errors.Is(err, payload.ErrNotFound) {
		s.logger.WarnContext(ctx, "an offloaded payload a run refers to is lost; its archive holds the reference alone",
			slog.String("sha256", r.SHA256), slog.Int64("size", r.Size))
		return nil, nil
	}
	return b, err
}
