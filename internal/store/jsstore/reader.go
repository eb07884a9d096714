package jsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/wait"
	"github.com/flowrun/flow/pkg/event"
)

// loadBatch is the number of messages read per direct-get request.
const loadBatch = 256

// batchTimeout bounds one batch read of a run's history; a batch cut short by it is read on
// (see scan), up to maxCutBatches in a row that brought nothing.
const (
	batchTimeout  = 10 * time.Second
	maxCutBatches = 3
)

// leaderCatchUp bounds how long a read asks the stream's leader again for commits it was told
// exist and the leader did not return. While the lead moves (often, on a loaded cluster) there
// is no leader for a moment, or for an election timeout (4 to 9 s) when an election fails, and
// the API answers 503; and nats-server lets a newly elected leader answer once it has processed
// the previous term's commits, before its store has applied them. After leaderCatchUp the read
// yields what it has (a run with fewer events) or the leader's error.
const leaderCatchUp = 15 * time.Second

// leaderAttempt bounds one read from the stream's leader within leaderCatchUp: a request sent
// while the stream has no leader gets no answer.
const leaderAttempt = 2 * time.Second

// LoadAtLeast implements store.EventStore: batched direct gets, then, if they stop short of
// atLeast, gets from the stream's leader for the rest. A history that does not read back whole
// (a message that is not a commit of the run, or whose sequences do not follow the message
// before it, and that no later run.damage_accepted voids) is an error wrapping
// event.ErrMalformed.
func (s *Store) LoadAtLeast(ctx context.Context, runID string, after, atLeast uint64) ([]event.Envelope, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	if err := s.quarantine.check(ctx, runID); err != nil {
		return nil, err
	}
	start, seen := uint64(1), uint64(0)
	s.mu.Lock()
	if p, ok := s.pos[runID]; ok {
		if p.runSeq <= after {
			start, seen = p.streamSeq+1, p.runSeq
		}
		// What this store appended or read before is there to read, whichever replica answers.
		atLeast = max(atLeast, p.runSeq)
	}
	s.mu.Unlock()
	return s.loadFrom(ctx, runID, after, atLeast, start, seen)
}

// loadFrom reads run runID's events after sequence after from stream sequence start on, where
// the run's next message holds sequence seen+1. A read that meets a repair going back before
// start reads the run again from its first message.
func (s *Store) loadFrom(ctx context.Context, runID string, after, atLeast, start, seen uint64) ([]event.Envelope, error) {
	r := newReader(s, runID, after, start, seen)
	err := s.scan(ctx, r, start, atLeast)
	if errors.Is(err, errRestart) {
		s.forget(runID)
		r = newReader(s, runID, after, 1, 0)
		err = s.scan(ctx, r, 1, atLeast)
	}
	if err != nil {
		return nil, err
	}
	if r.bad != nil {
		return nil, r.bad
	}
	return r.out, nil
}

// scan feeds r the run's messages from stream sequence start on: batched direct gets, then
// gets from the stream's leader while r has not read up to sequence atLeast, or has met a
// message that does not read (a later repair, which a lagging replica may lack, could void it).
//
// A batch ends at its end-of-batch marker, or silently at its context's deadline (the batch
// reader takes a timeout for the end): one that ran out of time is read on from where it
// stopped, never taken for the end of the run. A leader elected a moment ago may not hold the
// newest commits yet, and while the lead moves there is none: it is asked again, up to
// leaderCatchUp. A leader that holds nothing of a run of which nothing was read is taken at its
// word at once: the run does not exist.
func (s *Store) scan(ctx context.Context, r *reader, start, atLeast uint64) error {
	subject, leader := s.layout.Subject(r.runID), s.leaderOf(r.runID)
	for cutEmpty := 0; ; {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		msgs, err := jetstreamext.GetBatch(bctx, s.js, leader.stream, loadBatch,
			jetstreamext.GetBatchSeq(start), jetstreamext.GetBatchSubject(subject))
		if err != nil {
			cancel()
			return fmt.Errorf("reading run %q: %w", r.runID, err)
		}
		n := 0
		for m, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				cancel()
				return fmt.Errorf("reading run %q: %w", r.runID, err)
			}
			n++
			start = m.Sequence + 1
			if err := r.add(m); err != nil {
				cancel()
				return err
			}
		}
		cut := bctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("reading run %q: %w", r.runID, ctx.Err())
		}
		if cut && n == 0 {
			if cutEmpty++; cutEmpty == maxCutBatches {
				return fmt.Errorf("reading run %q: %d batch reads in a row got no answer within %s", r.runID, cutEmpty, batchTimeout)
			}
		} else {
			cutEmpty = 0
		}
		if n < loadBatch && !cut {
			break
		}
	}
	var giveUp time.Time
	backoff := 5 * time.Millisecond
	for r.bad != nil || r.seen < atLeast {
		// A replica answered without the newest commits: read them from the leader.
		actx, cancel := context.WithTimeout(ctx, leaderAttempt)
		m, err := leader.next(actx, subject, start)
		cancel()
		if err == nil && m != nil {
			start = m.Sequence + 1
			if err := r.add(m); err != nil {
				return err
			}
			continue
		}
		if r.bad != nil && err == nil {
			break // nothing voids the message that did not read
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(leaderCatchUp)
		}
		if err == nil && r.seen == 0 && r.marks[0].pos == 0 || time.Now().After(giveUp) || ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("reading run %q from the stream leader: %w", r.runID, err)
			}
			break // the run has fewer events than asked for
		}
		wait.For(ctx, backoff)
		backoff = min(2*backoff, 250*time.Millisecond)
	}
	return nil
}

// errRestart: a repair voids messages before the position a read started from.
var errRestart = errors.New("jsstore: a repair goes back before the read's start")

// reader collects a run's envelopes from its messages in stream order. Each message must be a
// commit of the run whose first sequence follows the last one read (a message that repeats or
// skips sequences is not the run's history). A repair (a commit that begins with
// run.damage_accepted) voids the run's messages after the position it names: what was read
// from them is dropped, and the messages that did not read among them no longer count. So the
// first message that does not read is only remembered (bad): a later repair may void it.
type reader struct {
	s     *Store
	runID string
	// after: events at or before it are read but not collected.
	after uint64
	// marks holds where the read started, then one entry per message read and kept.
	marks []mark
	// seen is the last sequence read, last the position of the last message read.
	seen, last uint64
	out        []event.Envelope
	// bad is the first message that did not read since the last kept one, if any.
	bad error
	// keepDeleted reads a deleted run's remaining events (LoadDeleted): the purge may have
	// removed its first ones, so they need not begin at seq 1.
	keepDeleted bool
}

// mark is the state of a read right after the message at stream sequence pos.
type mark struct {
	pos, seen uint64
	n         int // len(out)
}

func newReader(s *Store, runID string, after, start, seen uint64) *reader {
	return &reader{s: s, runID: runID, after: after, seen: seen, marks: []mark{{pos: start - 1, seen: seen}}}
}

// fail remembers the first message that did not read.
func (r *reader) fail(err error) {
	if r.bad == nil {
		r.bad = unreadable{err}
	}
}

// unreadable is the error of a history that does not read back whole: it wraps the reason
// (event.ErrMalformed) and matches store.ErrDamaged.
type unreadable struct{ err error }

func (u unreadable) Error() string        { return u.err.Error() }
func (u unreadable) Unwrap() error        { return u.err }
func (u unreadable) Is(target error) bool { return target == store.ErrDamaged }

// add reads message m. It returns errRestart, or a *store.DeletedError at the record of the
// run's deletion; a message that does not read sets r.bad.
func (r *reader) add(m *jetstream.RawStreamMsg) error {
	r.s.read.Add(1)
	r.last = m.Sequence
	if r.bad != nil && !IsRepair(m.Header) {
		return nil // only a repair can make what follows a bad message count
	}
	envs, err := event.DecodeEnvelopes(m.Data)
	if err == nil && len(envs) == 0 {
		err = fmt.Errorf("%w: it holds no events", event.ErrMalformed)
	}
	if err != nil {
		if !errors.Is(err, event.ErrMalformed) {
			err = errors.Join(event.ErrMalformed, err)
		}
		r.fail(fmt.Errorf("decoding stream message %d of run %q: %w", m.Sequence, r.runID, err))
		return nil
	}
	if d, ok := envs[0].Payload.(*event.RunDeleted); ok && envs[0].RunID == r.runID {
		// The retention sweeper deleted the run: its events before this record are archived,
		// and purged from the stream or about to be.
		return &store.DeletedError{RunID: r.runID, Seq: envs[0].Seq, Time: envs[0].Time, Deletion: d, StreamSeq: m.Sequence}
	}
	if r.keepDeleted && len(r.marks) == 1 && r.seen == 0 && envs[0].RunID == r.runID {
		r.seen = envs[0].Seq - 1 // what the purge left of a deleted run
	}
	if d, ok := envs[0].Payload.(*event.RunDamageAccepted); ok {
		if err := r.void(m.Sequence, d); err != nil {
			return err
		}
	}
	if r.bad != nil {
		return nil
	}
	for i, e := range envs {
		if e.Seq != r.seen+uint64(i)+1 || e.RunID != r.runID {
			r.fail(fmt.Errorf("%w: stream message %d holds seq %d of run %q where seq %d of run %q was next",
				event.ErrMalformed, m.Sequence, e.Seq, e.RunID, r.seen+uint64(i)+1, r.runID))
			return nil
		}
	}
	if err := r.s.verifyRead(r.runID, m.Sequence, m.Header, envs, m.Data); err != nil {
		r.fail(fmt.Errorf("decoding stream message %d of run %q: %w", m.Sequence, r.runID, err))
		return nil
	}
	for _, e := range envs {
		if e.Seq > r.after {
			r.out = append(r.out, e)
		}
	}
	r.seen += uint64(len(envs))
	r.marks = append(r.marks, mark{pos: m.Sequence, seen: r.seen, n: len(r.out)})
	r.s.remember(r.runID, r.seen, m.Sequence)
	return nil
}

// void applies the repair d, the first event of the message at pos: the read goes back to its
// state right after the message at d.After.
func (r *reader) void(pos uint64, d *event.RunDamageAccepted) error {
	if d.After < r.marks[0].pos {
		return errRestart
	}
	for i := len(r.marks) - 1; i >= 0; i-- {
		if k := r.marks[i]; k.pos == d.After {
			r.marks, r.out, r.seen, r.bad = r.marks[:i+1], r.out[:k.n], k.seen, nil
			// The positions this store remembers may be of voided messages.
			r.s.forget(r.runID)
			return nil
		}
	}
	r.fail(fmt.Errorf("%w: the run.damage_accepted at stream message %d goes back to stream message %d, which is not a commit of run %q read before it",
		event.ErrMalformed, pos, d.After, r.runID))
	return nil
}

// LoadDeleted reads what the stream still holds of run runID, a run whose deletion is recorded
// (a *store.DeletedError from the other reads): its events before run.deleted, as many as the
// purge has not removed yet (none once it has), and the error of that record. For a run that
// is not deleted it returns its history and a nil error.
func (s *Store) LoadDeleted(ctx context.Context, runID string) ([]event.Envelope, *store.DeletedError, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, nil, err
	}
	s.forget(runID)
	r := newReader(s, runID, 0, 1, 0)
	r.keepDeleted = true
	err := s.scan(ctx, r, 1, 0)
	var de *store.DeletedError
	if errors.As(err, &de) {
		return r.out, de, nil
	}
	if err == nil && r.bad != nil {
		err = r.bad
	}
	if err != nil {
		return nil, nil, err
	}
	return r.out, nil, nil
}
