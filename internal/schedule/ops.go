package schedule

import (
	"fmt"
	"slices"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// MaxNoteLength bounds a pause note.
const MaxNoteLength = 1024

// requestsSeen bounds the request IDs a schedule remembers to answer a retried trigger or
// backfill once.
const requestsSeen = 64

// New returns schedule s as created at now: its state starts at now, so that its first slot is
// the first after its creation.
func New(s Schedule, now time.Time) (*Schedule, *Timing, error) {
	t, err := s.Validate()
	if err != nil {
		return nil, nil, err
	}
	s.CreatedAt = now.UTC()
	s.State = State{Cursor: s.CreatedAt, UpdatedAt: s.CreatedAt, Paused: s.State.Paused, Note: s.State.Note}
	if len(s.State.Note) > MaxNoteLength {
		return nil, nil, fmt.Errorf("%w: the note is %d bytes long; the limit is %d", ErrInvalid, len(s.State.Note), MaxNoteLength)
	}
	return &s, t, nil
}

// Pause pauses s: its slots are recorded as paused, not started, until Unpause. Buffered
// slots wait for the unpause; triggers and backfills still act.
func (s *Schedule) Pause(note string, now time.Time) error {
	if len(note) > MaxNoteLength {
		return fmt.Errorf("%w: the note is %d bytes long; the limit is %d", ErrInvalid, len(note), MaxNoteLength)
	}
	s.State.Paused, s.State.Note, s.State.UpdatedAt = true, note, now.UTC()
	return nil
}

// Unpause resumes s. The slots that came while it was paused are not caught up: those a round
// has not recorded yet are recorded as paused now, and the next slot is the first after now.
func (s *Schedule) Unpause(t *Timing, note string, now time.Time) error {
	if len(note) > MaxNoteLength {
		return fmt.Errorf("%w: the note is %d bytes long; the limit is %d", ErrInvalid, len(note), MaxNoteLength)
	}
	if !s.State.Paused {
		s.State.Note, s.State.UpdatedAt = note, now.UTC()
		return nil
	}
	r := &round{s: s, t: t, now: now.UTC()}
	for range MaxSlotsPerRound {
		slot := t.Next(s.State.Cursor)
		if slot.IsZero() || t.FireAt(s.Name, slot).After(r.now) {
			break
		}
		s.State.Cursor = slot
		r.recordRun(Pending{Slot: slot, Kind: event.ScheduleScheduled}, Paused, "")
	}
	if s.State.Cursor.Before(r.now) {
		s.State.Cursor = r.now
	}
	s.State.Paused, s.State.Note, s.State.UpdatedAt = false, note, r.now
	return nil
}

// seen reports whether request id was taken already.
func (s *Schedule) seen(id string) bool {
	return id != "" && slices.Contains(s.State.Seen, id)
}

func (s *Schedule) remember(id string) {
	s.State.Seen = append(s.State.Seen, id)
	if len(s.State.Seen) > requestsSeen {
		s.State.Seen = slices.Delete(s.State.Seen, 0, len(s.State.Seen)-requestsSeen)
	}
}

// Trigger asks s for an action now (slot now, to the millisecond), under overlap policy
// overlap ("" for the schedule's). id identifies the request: a repeat is taken once, and the
// run's ID is derived from it (RunID), so that triggers with different IDs are different runs
// even in one millisecond. It reports whether the request is new; an empty id is refused.
func (s *Schedule) Trigger(id string, overlap Overlap, now time.Time) (bool, error) {
	if err := CheckOverlap(overlap); err != nil {
		return false, err
	}
	if id == "" {
		return false, fmt.Errorf("%w: a trigger needs a request ID (the ingress makes one when the caller gives none)", ErrInvalid)
	}
	if s.seen(id) {
		return false, nil
	}
	s.remember(id)
	s.State.Requests = append(s.State.Requests, Request{ID: id, Kind: event.ScheduleTrigger, At: now.UTC().Truncate(time.Millisecond), Overlap: overlap})
	s.State.UpdatedAt = now.UTC()
	return true, nil
}

// Backfill asks s for the actions of its slots in [start, end), under overlap policy overlap
// ("" for the schedule's), whatever the catch-up window and the pause. The range must be in the
// past. id identifies the request (runs' IDs are derived from it); a repeat is taken once.
func (s *Schedule) Backfill(t *Timing, id string, start, end time.Time, overlap Overlap, now time.Time) (bool, error) {
	if err := CheckOverlap(overlap); err != nil {
		return false, err
	}
	switch {
	case start.IsZero() || end.IsZero():
		return false, fmt.Errorf("%w: a backfill needs a start and an end, such as --start 2026-01-01T00:00:00Z --end 2026-01-02T00:00:00Z", ErrInvalid)
	case !start.Before(end):
		return false, fmt.Errorf("%w: the backfill's start %s is not before its end %s", ErrInvalid, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	case end.After(now):
		return false, fmt.Errorf("%w: the backfill's end %s is in the future; a backfill covers past slots (trigger acts now)", ErrInvalid, end.UTC().Format(time.RFC3339))
	case id == "" || len(id) > 32:
		return false, fmt.Errorf("%w: a backfill needs a request ID of 1 to 32 characters", ErrInvalid)
	}
	if err := ValidateName("x" + id); err != nil {
		return false, fmt.Errorf("%w: backfill request ID %q may hold only letters, digits, '-' and '_'", ErrInvalid, id)
	}
	if s.seen(id) {
		return false, nil
	}
	if t.Next(start.Add(-time.Nanosecond)).IsZero() || !t.Next(start.Add(-time.Nanosecond)).Before(end) {
		return false, fmt.Errorf("%w: the schedule has no slot in [%s, %s)", ErrInvalid, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	}
	s.remember(id)
	s.State.Requests = append(s.State.Requests, Request{ID: id, Kind: event.ScheduleBackfill, Start: start.UTC(), End: end.UTC(), Overlap: overlap})
	s.State.UpdatedAt = now.UTC()
	return true, nil
}
