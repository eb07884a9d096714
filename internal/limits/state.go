package limits

import (
	"fmt"
	"slices"
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// State is one flow-control group's entry: the runs holding its concurrency slots and the log
// of its recent admissions. The zero value is an empty group.
type State struct {
	// Group names the group whose state this is, so that a new admission controller finds the
	// groups FLOW_LIMITS holds (the key is the group's token).
	Group string `json:"group,omitempty"`
	// Holders are the runs that hold a slot, by run ID: reserved before their run.admitted was
	// appended, kept until their terminal event was committed.
	Holders map[string]Holder `json:"holders,omitempty"`
	// Log lists the admissions of the last Keep, oldest first; times never go backwards.
	Log []Admission `json:"log,omitempty"`
	// Keep is the longest rate period of the controls admitted so far: how far back Log reaches.
	Keep event.Duration `json:"keep,omitempty"`
	// Latest is the time of the latest admission ever logged, kept when the log is trimmed: no
	// admission is logged before it.
	Latest time.Time `json:"latest,omitzero"`
}

// Holder is a run holding a slot.
type Holder struct {
	Key string `json:"key,omitempty"`
	// At is when the slot was taken: the time its run.admitted is recorded at.
	At time.Time `json:"at"`
}

// Admission is one logged admission.
type Admission struct {
	Run string    `json:"run"`
	Key string    `json:"key,omitempty"`
	At  time.Time `json:"at"`
}

// Limit names a limit of a control, for Block.
type Limit string

const (
	LimitConcurrency    Limit = "concurrency"
	LimitKeyConcurrency Limit = "key_concurrency"
	LimitRate           Limit = "rate"
	LimitKeyRate        Limit = "key_rate"
)

// Block says which limit keeps a run from being admitted at a time.
type Block struct {
	Limit Limit
	// Until is, for a rate limit, the earliest time a token comes back: the run may be admitted
	// after it. Zero for a concurrency limit, which frees only when a holder is released.
	Until time.Time
}

// Keyed reports whether the limit is a key-scoped one.
func (b Block) Keyed() bool { return b.Limit == LimitKeyConcurrency || b.Limit == LimitKeyRate }

// Concurrency reports whether the limit is a concurrency limit.
func (b Block) Concurrency() bool {
	return b.Limit == LimitConcurrency || b.Limit == LimitKeyConcurrency
}

func (b Block) String() string {
	switch b.Limit {
	case LimitConcurrency:
		return "the group's concurrency limit is full"
	case LimitKeyConcurrency:
		return "the key's concurrency limit is full"
	case LimitRate:
		return "the group's rate limit is spent until " + b.Until.Format(time.RFC3339Nano)
	}
	return "the key's rate limit is spent until " + b.Until.Format(time.RFC3339Nano)
}

// Active counts the holders, and those of key.
func (st *State) Active(key string) (all, ofKey int) {
	for _, h := range st.Holders {
		all++
		if h.Key == key {
			ofKey++
		}
	}
	return all, ofKey
}

// Last returns the time of the latest admission logged, or the zero time.
func (st *State) Last() time.Time { return st.Latest }

// Check reports whether a run under control c may be admitted at t (no earlier than Last), and
// if not, the first limit that keeps it. A run that holds a slot already is admissible.
func (st *State) Check(runID string, c *event.FlowControl, t time.Time) (Block, bool) {
	if _, held := st.Holders[runID]; held {
		return Block{}, true
	}
	all, ofKey := st.Active(c.Key)
	if c.KeyConcurrency > 0 && ofKey >= c.KeyConcurrency {
		return Block{Limit: LimitKeyConcurrency}, false
	}
	if c.Concurrency > 0 && all >= c.Concurrency {
		return Block{Limit: LimitConcurrency}, false
	}
	if c.KeyRate > 0 {
		if until, ok := st.window(c.Key, true, c.KeyRate, time.Duration(c.KeyRatePeriod), t); !ok {
			return Block{Limit: LimitKeyRate, Until: until}, false
		}
	}
	if c.Rate > 0 {
		if until, ok := st.window("", false, c.Rate, time.Duration(c.RatePeriod), t); !ok {
			return Block{Limit: LimitRate, Until: until}, false
		}
	}
	return Block{}, true
}

// window reports whether fewer than n logged admissions (of key, when keyed) lie in [t-period, t];
// if not, until is the earliest time after which one more fits: period after the n-th latest.
func (st *State) window(key string, keyed bool, n int, period time.Duration, t time.Time) (until time.Time, ok bool) {
	count := 0
	for i := len(st.Log) - 1; i >= 0; i-- {
		a := st.Log[i]
		if keyed && a.Key != key {
			continue
		}
		if t.Sub(a.At) > period {
			break
		}
		count++
		if count >= n {
			// One more at t would put n+1 into a window of length period. The oldest of these n
			// leaves every window holding t once t-period is past it.
			return a.At.Add(period).Add(time.Nanosecond), false
		}
	}
	return time.Time{}, true
}

// Take records the admission of run runID under control c at t: a slot, and a log entry. The
// caller checked it (Check). t must not be before Last: the log's times never go backwards.
func (st *State) Take(runID string, c *event.FlowControl, t time.Time) error {
	if t.Before(st.Last()) {
		return fmt.Errorf("limits: admission of run %q at %s precedes the group's latest at %s", runID, t.Format(time.RFC3339Nano), st.Last().Format(time.RFC3339Nano))
	}
	if st.Holders == nil {
		st.Holders = map[string]Holder{}
	}
	st.Holders[runID] = Holder{Key: c.Key, At: t}
	st.Keep = max(st.Keep, c.RatePeriod, c.KeyRatePeriod)
	st.Log = append(st.Log, Admission{Run: runID, Key: c.Key, At: t})
	st.Latest = t
	return nil
}

// Release frees run runID's slot and reports whether it held one. Its log entry stays: the
// admission happened, and counts against the rate until it ages out.
func (st *State) Release(runID string) bool {
	if _, ok := st.Holders[runID]; !ok {
		return false
	}
	delete(st.Holders, runID)
	return true
}

// Unreserve undoes a reservation whose run.admitted was never appended (the run ended first, or
// could not be stamped at the reserved time): its slot and its log entry go. It reports whether
// anything changed.
func (st *State) Unreserve(runID string) bool {
	changed := st.Release(runID)
	if i := slices.IndexFunc(st.Log, func(a Admission) bool { return a.Run == runID }); i >= 0 {
		st.Log = slices.Delete(st.Log, i, i+1)
		changed = true
	}
	return changed
}

// Trim drops the log entries that no window ending at now or later can count: those older than
// Keep before now. It reports whether it dropped any.
func (st *State) Trim(now time.Time) bool {
	keep := time.Duration(st.Keep)
	i := 0
	for i < len(st.Log) && now.Sub(st.Log[i].At) > keep {
		i++
	}
	if i == 0 {
		return false
	}
	st.Log = slices.Delete(st.Log, 0, i)
	return true
}
