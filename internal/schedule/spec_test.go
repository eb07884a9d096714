package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func compile(t *testing.T, s Spec) *Timing {
	t.Helper()
	tm, err := s.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestCronDST checks Flow's DST rule in Europe/Berlin, where clocks go forward from 02:00 CET
// to 03:00 CEST on 29 March 2026 and back from 03:00 CEST to 02:00 CET on 25 October 2026: a
// slot in the skipped hour fires once at the first valid instant (03:00 CEST), and a wall time
// in the repeated hour fires once, at its first occurrence.
func TestCronDST(t *testing.T) {
	cases := []struct {
		name, cron, after string
		want              []string // UTC
	}{
		{"daily 02:30, spring forward", "30 2 * * *", "2026-03-27T12:00:00Z", []string{
			"2026-03-28T01:30:00Z", // 02:30 CET
			"2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST, the end of the gap
			"2026-03-30T00:30:00Z", // 02:30 CEST
		}},
		{"daily 02:30, fall back", "30 2 * * *", "2026-10-23T12:00:00Z", []string{
			"2026-10-24T00:30:00Z", // 02:30 CEST
			"2026-10-25T00:30:00Z", // 02:30 CEST, the first of the two; 02:30 CET does not fire
			"2026-10-26T01:30:00Z", // 02:30 CET
		}},
		{"hourly, spring forward", "0 * * * *", "2026-03-28T23:30:00Z", []string{
			"2026-03-29T00:00:00Z", // 01:00 CET
			"2026-03-29T01:00:00Z", // 02:00 (skipped) and 03:00 CEST are one instant: one slot
			"2026-03-29T02:00:00Z", // 04:00 CEST
		}},
		{"hourly, fall back", "0 * * * *", "2026-10-24T22:30:00Z", []string{
			"2026-10-24T23:00:00Z", // 01:00 CEST
			"2026-10-25T00:00:00Z", // 02:00 CEST; 02:00 CET (01:00Z) is the same wall time: no slot
			"2026-10-25T02:00:00Z", // 03:00 CET
		}},
		{"weekdays 09:00 across spring forward", "0 9 * * MON-FRI", "2026-03-26T12:00:00Z", []string{
			"2026-03-27T08:00:00Z", // Friday 09:00 CET
			"2026-03-30T07:00:00Z", // Monday 09:00 CEST
			"2026-03-31T07:00:00Z",
		}},
		{"every 15 minutes in the gap", "*/15 * * * *", "2026-03-29T00:50:00Z", []string{
			"2026-03-29T01:00:00Z", // 02:00..02:45 (skipped) and 03:00 CEST: one slot
			"2026-03-29T01:15:00Z", // 03:15 CEST
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := compile(t, Spec{Cron: c.cron, TZ: "Europe/Berlin"})
			got := tm.NextN(utc(c.after), len(c.want))
			for i, w := range c.want {
				if i >= len(got) || !got[i].Equal(utc(w)) {
					t.Fatalf("slots after %s: got %v, want %v", c.after, got, c.want)
				}
			}
		})
	}
}

// TestRobfigDST records what github.com/robfig/cron/v3 does on its own when it computes slots in
// the zone (why Timing matches cron expressions on zone-less wall time and places them
// itself): it skips a slot in the spring-forward gap and fires a slot of the repeated hour
// twice.
func TestRobfigDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := cron.ParseStandard("30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	cs := sched.(*cron.SpecSchedule)
	cs.Location = berlin
	spring := cs.Next(utc("2026-03-28T12:00:00Z"))
	if !spring.Equal(utc("2026-03-30T00:30:00Z")) {
		t.Errorf("robfig's next slot after 28 March noon is %s; the test expected it to skip 29 March", spring.UTC())
	}
	first := cs.Next(utc("2026-10-24T12:00:00Z"))
	second := cs.Next(first)
	if !first.Equal(utc("2026-10-25T00:30:00Z")) || !second.Equal(utc("2026-10-25T01:30:00Z")) {
		t.Errorf("robfig's slots on 25 October: %s, %s; the test expected both 02:30 CEST and 02:30 CET", first.UTC(), second.UTC())
	}
}

func TestEveryOffsetAndJitter(t *testing.T) {
	tm := compile(t, Spec{Every: event.Duration(15 * time.Minute), Offset: event.Duration(5 * time.Minute)})
	got := tm.NextN(utc("2026-06-01T10:05:00Z"), 3)
	want := []string{"2026-06-01T10:20:00Z", "2026-06-01T10:35:00Z", "2026-06-01T10:50:00Z"}
	for i := range want {
		if !got[i].Equal(utc(want[i])) {
			t.Fatalf("slots: got %v, want %v", got, want)
		}
	}
	j := compile(t, Spec{Every: event.Duration(time.Hour), Jitter: event.Duration(10 * time.Minute)})
	slot := utc("2026-06-01T10:00:00Z")
	a, b := j.Jitter("report", slot), j.Jitter("report", slot)
	if a != b || a < 0 || a >= 10*time.Minute {
		t.Fatalf("jitter %s, %s: want the same, in [0, 10m)", a, b)
	}
	distinct := map[time.Duration]bool{}
	for i := range 20 {
		distinct[j.Jitter("report", slot.Add(time.Duration(i)*time.Hour))] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("jitter takes %d values over 20 slots; want it spread", len(distinct))
	}
	if !j.FireAt("report", slot).Equal(slot.Add(a)) {
		t.Fatal("FireAt is not slot + Jitter")
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		spec Spec
		want string
	}{
		{Spec{}, "needs a cron expression"},
		{Spec{Cron: "0 9 * * MON-FRI", Every: event.Duration(time.Hour)}, "not both"},
		{Spec{Cron: "0 9 * * MUN"}, "write five fields"},
		{Spec{Cron: "0 9 * *"}, "write five fields"},
		{Spec{Cron: "0 9 30 2 *"}, "never matches"},
		{Spec{Cron: "0 9 * * *", TZ: "Europe/Berlyn"}, "unknown time zone \"Europe/Berlyn\"; give an IANA name such as Europe/Berlin"},
		{Spec{Cron: "@every 5m"}, "use --every"},
		{Spec{Cron: "CRON_TZ=UTC 0 9 * * *"}, "with --tz"},
		{Spec{Every: event.Duration(time.Millisecond)}, "too short"},
		{Spec{Every: event.Duration(time.Hour), Offset: event.Duration(2 * time.Hour)}, "shorter than the interval"},
		{Spec{Every: event.Duration(time.Hour), TZ: "Europe/Berlin"}, "goes with a cron expression"},
		{Spec{Cron: "0 9 * * *", Jitter: event.Duration(-time.Second)}, "negative"},
	}
	for _, c := range cases {
		_, err := c.spec.Compile()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an ErrInvalid saying %q", c.spec, err, c.want)
		}
	}
	for _, ok := range []Spec{{Cron: "@daily", TZ: "America/New_York"}, {Cron: "0 9 * * MON-FRI", TZ: "UTC"}, {Every: event.Duration(time.Minute)}} {
		if _, err := ok.Compile(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	s := Schedule{Name: "r", Definition: "report", Spec: Spec{Every: event.Duration(time.Minute)}, Overlap: "bufer_one"}
	if _, err := s.Validate(); err == nil || !strings.Contains(err.Error(), `"bufer_one" is not one of skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all`) {
		t.Errorf("overlap typo: %v", err)
	}
	for _, bad := range []string{"", "1abc", "a.b", "a b", strings.Repeat("a", 65)} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
}

func TestRunIDs(t *testing.T) {
	slot := utc("2026-03-29T01:00:00Z")
	for _, c := range []struct {
		kind Kind
		want string
	}{
		{event.ScheduleScheduled, "report-20260329T010000Z"},
		{event.ScheduleBackfill, "report-bq1-20260329T010000Z"},
		{event.ScheduleTrigger, "report-t20260329T010000123Z-9c4c9197"},
	} {
		s := slot
		if c.kind == event.ScheduleTrigger {
			s = s.Add(123 * time.Millisecond)
		}
		got := RunID("report", c.kind, s, "q1")
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.kind, got, c.want)
		}
		if err := event.ValidateRunID(got); err != nil {
			t.Error(err)
		}
	}
}

// TestNextLongFallBack: in Antarctica/Troll clocks go back two hours (03:00 +02 to 01:00 +00)
// on the last Sunday of October, so every wall time from 01:00 to 02:59 occurs twice. From an
// instant in the second occurrence, a minutely schedule's next slot is 03:00 +00: the repeated
// wall times had their slots at their first occurrences. Next must find it, however many
// repeated wall times lie in between.
func TestNextLongFallBack(t *testing.T) {
	tm := compile(t, Spec{Cron: "* * * * *", TZ: "Antarctica/Troll"})
	for _, after := range []string{"2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:58:30Z"} {
		got := tm.NextN(utc(after), 2)
		require.Equal(t, []time.Time{utc("2026-10-25T03:00:00Z"), utc("2026-10-25T03:01:00Z")}, got, "after %s", after)
	}
	// Before the change, each minute has its slot, up to 02:59 +02; then 03:00 +00.
	require.Equal(t, []time.Time{utc("2026-10-25T00:59:00Z"), utc("2026-10-25T03:00:00Z")}, tm.NextN(utc("2026-10-25T00:58:00Z"), 2))
	// A schedule created in the repeated hours starts at 03:00 +00.
	w := newWorld(t, Schedule{Name: "r", Definition: "report", Spec: Spec{Cron: "* * * * *", TZ: "Antarctica/Troll"}, Overlap: AllowAll},
		"2026-10-25T01:00:00Z")
	w.at("2026-10-25T03:00:00Z")
	require.Len(t, w.started, 1)
	require.Equal(t, utc("2026-10-25T03:00:00Z"), w.refs[w.started[0]].Slot)
}
