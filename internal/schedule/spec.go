// Package schedule is the pure logic of Flow's schedules (docs/schedules.md): the timing spec
// (a cron expression in a time zone, or a fixed interval with an offset), the slots it yields
// and their jittered fire times, and the state machine that decides, for a given time and the
// states of the runs a schedule started, which runs to start, cancel or terminate, which slots
// to buffer and which to skip (overlap policies, catch-up window, pause, trigger, backfill).
//
// Nothing here reads a clock or does I/O: every function takes the time it works at, so that
// tests drive it with a virtual clock. The scheduler service (services/scheduler/schedule.go)
// executes the effects a round returns and then stores the state, by compare-and-set.
package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	// Schedules name IANA time zones, and Flow's images are FROM scratch: no zoneinfo on disk.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/flowrun/flow/pkg/event"
)

// ErrInvalid is wrapped by every error about a schedule's fields.
var ErrInvalid = errors.New("flow: invalid schedule")

// Spec says when a schedule's slots are: either Cron, a five-field cron expression (minute,
// hour, day of month, month, day of week; names such as MON-FRI and JAN work, as do the
// descriptors @hourly, @daily, @weekly, @monthly, @yearly) read as wall-clock time in TZ; or
// Every, a fixed interval counted from the Unix epoch plus Offset (Every 1h with Offset 15m
// gives 00:15, 01:15, ... UTC). Jitter delays each slot's fire time by a pseudo-random amount
// in [0, Jitter), the same for the same schedule and slot, so that many schedules with the
// same spec do not all fire at once.
type Spec struct {
	Cron   string         `json:"cron,omitempty"`
	TZ     string         `json:"tz,omitempty"`
	Every  event.Duration `json:"every,omitempty"`
	Offset event.Duration `json:"offset,omitempty"`
	Jitter event.Duration `json:"jitter,omitempty"`
}

// cronParser reads standard five-field expressions and descriptors. Seconds are not offered: a
// schedule is not a timer wheel, and --every covers sub-minute intervals.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Timing is a checked Spec, ready to compute slots.
type Timing struct {
	spec  Spec
	loc   *time.Location
	cron  *cron.SpecSchedule
	every time.Duration
}

// MinEvery is the shortest interval a schedule may have.
const MinEvery = time.Second

// Compile checks s and returns its Timing. Its errors wrap ErrInvalid and say what to write.
func (s Spec) Compile() (*Timing, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	t := &Timing{spec: s, loc: time.UTC, every: time.Duration(s.Every)}
	switch {
	case s.Cron == "" && s.Every == 0:
		return nil, bad("a schedule needs a cron expression (--cron '0 9 * * MON-FRI') or an interval (--every 15m)")
	case s.Cron != "" && s.Every != 0:
		return nil, bad("a schedule has either a cron expression (%q) or an interval (%s), not both", s.Cron, time.Duration(s.Every))
	case s.Every < 0 || s.Every != 0 && time.Duration(s.Every) < MinEvery:
		return nil, bad("interval %s is too short; give %s or more, such as 15m", time.Duration(s.Every), MinEvery)
	case s.Every != 0 && (s.Offset < 0 || s.Offset >= s.Every):
		return nil, bad("offset %s must be at least 0 and shorter than the interval %s", time.Duration(s.Offset), time.Duration(s.Every))
	case s.Cron != "" && s.Offset != 0:
		return nil, bad("an offset (%s) goes with an interval (--every); a cron expression says its own minutes", time.Duration(s.Offset))
	case s.Every != 0 && s.TZ != "":
		return nil, bad("a time zone (%q) goes with a cron expression; an interval is counted in absolute time", s.TZ)
	case s.Jitter < 0:
		return nil, bad("jitter %s is negative; give 0 or a positive duration such as 30s", time.Duration(s.Jitter))
	}
	if s.TZ != "" {
		loc, err := time.LoadLocation(s.TZ)
		if err != nil || s.TZ == "Local" {
			return nil, bad("unknown time zone %q; give an IANA name such as Europe/Berlin, America/New_York or UTC", s.TZ)
		}
		t.loc = loc
	}
	if s.Cron != "" {
		if strings.HasPrefix(strings.TrimSpace(s.Cron), "TZ=") || strings.HasPrefix(strings.TrimSpace(s.Cron), "CRON_TZ=") {
			return nil, bad("cron expression %q names its time zone; give the zone with --tz instead", s.Cron)
		}
		if strings.HasPrefix(strings.TrimSpace(s.Cron), "@every") {
			return nil, bad("cron expression %q is an interval; use --every instead", s.Cron)
		}
		sched, err := cronParser.Parse(s.Cron)
		if err != nil {
			return nil, bad("cron expression %q: %v; write five fields: minute hour day-of-month month day-of-week (names: MON-SUN, JAN-DEC), such as '0 9 * * MON-FRI' or '*/15 * * * *'", s.Cron, err)
		}
		cs, ok := sched.(*cron.SpecSchedule)
		if !ok {
			return nil, bad("cron expression %q is not a calendar expression; write five fields such as '0 9 * * MON-FRI'", s.Cron)
		}
		// Slots are computed on wall-clock time without a zone (UTC has no DST), and only then
		// placed in the schedule's zone: see Next.
		c := *cs
		c.Location = time.UTC
		t.cron = &c
		if t.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			return nil, bad("cron expression %q never matches a date (such as 30 February); check its day and month fields", s.Cron)
		}
	}
	return t, nil
}

// Spec returns the spec t was compiled from.
func (t *Timing) Spec() Spec { return t.spec }

// Location returns the time zone of t's wall-clock times (UTC for an interval).
func (t *Timing) Location() *time.Location { return t.loc }

// Next returns the first slot strictly after instant after, or the zero time if there is none
// within five years. Slots are instants.
//
// A cron expression is matched against wall-clock times in the schedule's zone, and each
// matching wall time becomes one slot:
//   - a wall time that does not exist (the hour skipped when clocks go forward) becomes the
//     first instant after the gap: '30 2 * * *' in Europe/Berlin fires at 03:00 CEST on the
//     last Sunday of March; several wall times in one gap (and the first wall time after it)
//     give that one instant, which is one slot;
//   - a wall time that occurs twice (the hour repeated when clocks go back) is one slot, at its
//     first occurrence: '30 2 * * *' fires once, at 02:30 CEST, on the last Sunday of October,
//     and so does each slot of an hourly expression in the repeated hour.
//
// From an instant in the second occurrence of repeated wall times, the wall times after it up
// to the end of the repetition had their slots at their first occurrences, before after: Next
// passes over them (a minutely expression over a two-hour repetition, as in Antarctica/Troll,
// passes 119), and only gives up past maxRepeat of wall time, longer than any zone's shift.
func (t *Timing) Next(after time.Time) time.Time {
	if t.cron == nil {
		return t.nextEvery(after)
	}
	from := naive(after.In(t.loc))
	for wall := from; ; {
		w := t.cron.Next(wall)
		if w.IsZero() {
			return time.Time{}
		}
		if at := t.place(w); at.After(after) {
			return at
		}
		if w.Sub(from) > maxRepeat {
			return time.Time{}
		}
		wall = w
	}
}

// maxRepeat bounds the wall time Next passes over whose slots lie before the instant it starts
// from: no zone's clock goes back by as much (offsets span UTC-12 to UTC+14).
const maxRepeat = 48 * time.Hour

func (t *Timing) nextEvery(after time.Time) time.Time {
	every, offset := t.every, time.Duration(t.spec.Offset)
	// k is the first slot index with epoch+offset+k*every > after.
	since := after.Sub(time.Unix(0, 0).Add(offset))
	k := since / every
	if since >= 0 {
		k++
	}
	return time.Unix(0, 0).Add(offset).Add(k * every).UTC()
}

// naive returns the wall-clock fields of t as a time in UTC.
func naive(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// place returns the instant of wall time w (fields in UTC) in t's zone: the first occurrence of
// a repeated wall time, the end of the gap for a skipped one.
func (t *Timing) place(w time.Time) time.Time {
	at := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, t.loc)
	if !naive(at).Equal(w) {
		// In a gap: Go normalised it with the offset before the gap, past the transition. The
		// zone in effect at the result began at the transition, the first valid instant.
		if start, _ := at.ZoneBounds(); !start.IsZero() && !start.After(at) {
			return start.UTC()
		}
		return at.UTC()
	}
	// A repeated wall time: an earlier instant with the same wall time is its first occurrence.
	for _, d := range []time.Duration{-3 * time.Hour, -2 * time.Hour, -time.Hour, -30 * time.Minute} {
		if e := at.Add(d); naive(e.In(t.loc)).Equal(w) {
			return e.UTC()
		}
	}
	return at.UTC()
}

// Jitter returns the delay of slot's fire time for the schedule named name: in [0, Jitter),
// derived from the name and the slot, so the same on every replica and every restart.
func (t *Timing) Jitter(name string, slot time.Time) time.Duration {
	j := time.Duration(t.spec.Jitter)
	if j <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	_, _ = h.Write([]byte(slot.UTC().Format(time.RFC3339Nano)))
	return time.Duration(h.Sum64() % uint64(j))
}

// FireAt returns when slot fires for the schedule named name: the slot plus its jitter.
func (t *Timing) FireAt(name string, slot time.Time) time.Time {
	return slot.Add(t.Jitter(name, slot))
}

// NextN returns the next n slots after instant after.
func (t *Timing) NextN(after time.Time, n int) []time.Time {
	var out []time.Time
	for range n {
		s := t.Next(after)
		if s.IsZero() {
			break
		}
		out = append(out, s)
		after = s
	}
	return out
}
