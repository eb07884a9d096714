package jsstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Damaged histories. A run's subject may hold messages that are not its history: written by
// hand or by a faulty writer with the right to publish there (a message without commit
// headers, one whose sequences do not follow the message before it, events that break the
// history's invariants). Readers refuse such a history (event.ErrMalformed, or the invariant
// check of the projection), and the history service quarantines the run. An operator releases
// it with a repair: a commit, appended after whatever the subject holds, that begins with
// run.damage_accepted naming the position of the last message of the history's longest valid
// prefix. Readers drop what they read after that position and go on with the repair: the run's
// history is its valid prefix, then the repair and what follows it. Nothing is deleted; the
// voided messages stay in the stream for inspection.

// IsRepair reports whether the history message with headers h is a repair: a commit whose
// first event is run.damage_accepted.
func IsRepair(h nats.Header) bool {
	first, _, _ := strings.Cut(h.Get(HeaderTypes), ",")
	return first == string(event.TypeRunDamageAccepted)
}

// Salvage reads run runID's whole history, whether or not the run is quarantined, up to its
// first message that does not read back, with the repairs it holds applied, and every message
// up to the run's last on the stream's leader.
func (s *Store) Salvage(ctx context.Context, runID string) (*store.Salvage, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	subject, leader := s.layout.Subject(runID), s.leaderOf(runID)
	lm, err := leader.last(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("reading the last message of run %q: %w", runID, err)
	}
	var atLeast uint64
	if lm != nil {
		atLeast, _ = LastSeq(lm.Header)
	}
	r := newReader(s, runID, 0, 1, 0)
	if err := s.scan(ctx, r, 1, atLeast); err != nil {
		return nil, err
	}
	for lm != nil && r.last < lm.Sequence {
		m, err := leader.next(ctx, subject, r.last+1)
		if err != nil {
			return nil, fmt.Errorf("reading run %q from the stream leader: %w", runID, err)
		}
		if m == nil {
			break
		}
		if err := r.add(m); err != nil {
			return nil, err
		}
	}
	sv := &store.Salvage{RunID: runID, Damage: r.bad, Last: r.last}
	for i := 1; i < len(r.marks); i++ {
		sv.Commits = append(sv.Commits, store.SalvagedCommit{Events: r.out[r.marks[i-1].n:r.marks[i].n], Pos: r.marks[i].pos})
	}
	return sv, nil
}

// AppendRepair appends events to run runID as sequences expected+1.., whatever the run's
// messages after its commit at sequence expected hold, and whether or not the run is
// quarantined. The first event must be a run.damage_accepted whose Through is last, the store
// position of the run's last message (a Salvage's Last): the repair commits only while that
// message is still the run's last, and else returns an error wrapping store.ErrConflict and
// commits nothing.
func (s *Store) AppendRepair(ctx context.Context, runID string, expected, last uint64, events ...event.Event) (uint64, error) {
	if err := store.CheckAppend(runID, events); err != nil {
		return 0, err
	}
	if d, ok := events[0].Payload.(*event.RunDamageAccepted); !ok || d.Through != last || expected == 0 {
		return 0, fmt.Errorf("%w: a repair of run %q must follow its first event and begin with run.damage_accepted through store position %d",
			event.ErrMalformed, runID, last)
	}
	first, lastSeq := expected+1, expected+uint64(len(events))
	envs := make([]event.Envelope, len(events))
	for i, e := range events {
		envs[i] = event.Envelope{RunID: runID, Seq: first + uint64(i), Time: e.Time.UTC(), Payload: e.Payload}
	}
	body, err := event.MarshalEnvelopes(envs)
	if err != nil {
		return 0, fmt.Errorf("encoding the repair of run %q: %w", runID, err)
	}
	commit := nuid.Next()
	msg := s.message(ctx, runID, envs, body, commit)
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last))
	switch {
	case err == nil:
	case isWrongLastSequence(err):
		return 0, fmt.Errorf("%w: run %q was written to while its repair was being appended; read it again", store.ErrConflict, runID)
	case transient(err, ctx):
		// The ack was lost or the server was briefly away: find out whether it committed.
		m, rerr := s.leaderOf(runID).next(ctx, s.layout.Subject(runID), last+1)
		if rerr != nil || m == nil || m.Header.Get(HeaderCommit) != commit {
			return 0, fmt.Errorf("appending the repair of run %q: %w", runID, err)
		}
		ack = &jetstream.PubAck{Sequence: m.Sequence}
	default:
		return 0, fmt.Errorf("appending the repair of run %q: %w", runID, err)
	}
	s.forget(runID)
	s.remember(runID, lastSeq, ack.Sequence)
	return lastSeq, nil
}
