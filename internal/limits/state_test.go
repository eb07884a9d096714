package limits_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/limits"
	"github.com/flowrun/flow/pkg/event"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func TestCheck(t *testing.T) {
	t.Parallel()
	keyed := &event.FlowControl{Group: "g", Key: "a", KeyConcurrency: 2}
	global := &event.FlowControl{Group: "g", Key: "a", Concurrency: 3}
	rate := &event.FlowControl{Group: "g", Rate: 2, RatePeriod: event.Duration(time.Second)}
	keyRate := &event.FlowControl{Group: "g", Key: "a", KeyRate: 1, KeyRatePeriod: event.Duration(time.Second)}
	hold := func(runs ...string) *limits.State {
		st := &limits.State{Holders: map[string]limits.Holder{}}
		for i, r := range runs {
			key := "a"
			if r[0] == 'b' {
				key = "b"
			}
			st.Holders[r] = limits.Holder{Key: key, At: t0.Add(time.Duration(i) * time.Millisecond)}
		}
		return st
	}
	logged := func(key string, ats ...time.Duration) *limits.State {
		st := &limits.State{}
		for i, d := range ats {
			st.Log = append(st.Log, limits.Admission{Run: fmt.Sprintf("r%d", i), Key: key, At: t0.Add(d)})
		}
		return st
	}
	for _, tc := range []struct {
		name  string
		st    *limits.State
		c     *event.FlowControl
		at    time.Time
		ok    bool
		limit limits.Limit
		until time.Time
	}{
		{"key has room", hold("a1", "b1", "b2"), keyed, t0, true, "", time.Time{}},
		{"key full", hold("a1", "a2"), keyed, t0, false, limits.LimitKeyConcurrency, time.Time{}},
		{"other keys do not count", hold("b1", "b2", "b3"), keyed, t0, true, "", time.Time{}},
		{"group full", hold("a1", "b1", "b2"), global, t0, false, limits.LimitConcurrency, time.Time{}},
		{"a holder is admissible", hold("new", "a2"), keyed, t0, true, "", time.Time{}},
		{"rate has a token", logged("", 0), rate, t0.Add(time.Second), true, "", time.Time{}},
		{"rate spent", logged("", 0, 500*time.Millisecond), rate, t0.Add(900 * time.Millisecond), false, limits.LimitRate,
			t0.Add(time.Second + time.Nanosecond)},
		// A window is closed: an admission exactly one period after the n-th latest would put
		// n+1 into [t-P, t].
		{"rate boundary is inside the window", logged("", 0, 500*time.Millisecond), rate, t0.Add(time.Second), false, limits.LimitRate,
			t0.Add(time.Second + time.Nanosecond)},
		{"rate token back after the period", logged("", 0, 500*time.Millisecond), rate, t0.Add(time.Second + time.Nanosecond), true, "", time.Time{}},
		{"key rate spent", logged("a", 0), keyRate, t0.Add(10 * time.Millisecond), false, limits.LimitKeyRate, t0.Add(time.Second + time.Nanosecond)},
		{"key rate counts its key only", logged("b", 0), keyRate, t0.Add(10 * time.Millisecond), true, "", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			blk, ok := tc.st.Check("new", tc.c, tc.at)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.limit, blk.Limit)
			require.True(t, tc.until.Equal(blk.Until), "until %s, want %s", blk.Until, tc.until)
		})
	}
}

// TestRateNeverExceeded admits greedily, as fast as Check allows, over a clock that advances in
// random small steps, and checks the sliding-window guarantee on the admission times: never more
// than N in any closed window of length P, whereas a refill bucket lets 2N through around a
// refill boundary.
func TestRateNeverExceeded(t *testing.T) {
	t.Parallel()
	const n, period = 5, time.Second
	c := &event.FlowControl{Group: "g", Rate: n, RatePeriod: event.Duration(period)}
	st := &limits.State{}
	now := t0
	var times []time.Time
	for i := 0; now.Before(t0.Add(20 * period)); i++ {
		now = now.Add(time.Duration(1+(i*7919)%97) * time.Millisecond)
		st.Trim(now)
		for {
			at := now
			if _, ok := st.Check(fmt.Sprint(len(times)), c, at); !ok {
				break
			}
			require.NoError(t, st.Take(fmt.Sprint(len(times)), c, at))
			st.Release(fmt.Sprint(len(times)))
			times = append(times, at)
		}
	}
	require.Greater(t, len(times), 19*n)
	for i := 0; i+n < len(times); i++ {
		require.Greater(t, times[i+n].Sub(times[i]), period, "admissions %d..%d at %s..%s", i, i+n, times[i], times[i+n])
	}
	require.LessOrEqual(t, len(st.Log), n+1, "the log keeps one period of admissions")
}

func TestTakeReleaseUnreserve(t *testing.T) {
	t.Parallel()
	c := &event.FlowControl{Group: "g", Key: "a", KeyConcurrency: 1, Rate: 10, RatePeriod: event.Duration(time.Minute)}
	st := &limits.State{}
	require.NoError(t, st.Take("r1", c, t0))
	require.Error(t, st.Take("r2", c, t0.Add(-time.Second)), "log times never go backwards")
	_, ok := st.Check("r2", c, t0)
	require.False(t, ok)
	require.True(t, st.Release("r1"))
	require.False(t, st.Release("r1"), "a release is idempotent")
	require.Len(t, st.Log, 1, "a released admission still counts against the rate")
	require.NoError(t, st.Take("r2", c, t0.Add(time.Second)))
	require.True(t, st.Unreserve("r2"))
	require.Len(t, st.Log, 1, "an admission never appended gives its token back")
	require.Empty(t, st.Holders)
	require.False(t, st.Unreserve("r2"))
	require.False(t, st.Trim(t0.Add(time.Minute)))
	require.True(t, st.Trim(t0.Add(time.Minute+time.Nanosecond)))
	require.Empty(t, st.Log)
	require.True(t, t0.Add(time.Second).Equal(st.Last()), "the latest time survives a trim")
}

func TestKeyOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, input, want, err string
	}{
		{"$.customer", `{"customer":"c-42"}`, "c-42", ""},
		{"$.order.region", `{"order":{"region":"eu"}}`, "eu", ""},
		{"$.n", `{"n":42}`, "42", ""},
		{"$.vip", `{"vip":true}`, "true", ""},
		{"$.customer", `{"other":1}`, "", "has no field at $.customer"},
		{"$.customer", `{"customer":null}`, "", "is null"},
		{"$.customer", `{"customer":{"id":1}}`, "", "is an object"},
		{"$.customer", `{"customer":""}`, "", "empty string"},
		{"$.order.region", `{"order":"x"}`, "", "$.order is not an object"},
		{"$.customer", `[1]`, "", "$. is not an object"},
		{"customer", `{}`, "", `must start with "$."`},
		{"$.a..b", `{}`, "", "empty segment"},
		{"$.a b", `{}`, "", "may hold only"},
	} {
		t.Run(tc.path+" "+tc.input, func(t *testing.T) {
			t.Parallel()
			got, err := limits.KeyOf(tc.path, json.RawMessage(tc.input))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	reg := &event.FlowControl{KeyPath: "$.customer", KeyConcurrency: 2}
	in := json.RawMessage(`{"customer":"c-1"}`)

	c, err := limits.Resolve("job", reg, nil, in)
	require.NoError(t, err)
	require.Equal(t, &event.FlowControl{Group: "job", Key: "c-1", KeyPath: "$.customer", KeyConcurrency: 2, OnLimit: event.OnLimitQueue}, c)

	c, err = limits.Resolve("job", reg, &event.FlowControl{Key: "vip"}, in)
	require.NoError(t, err)
	require.Equal(t, "vip", c.Key, "a start may give only the key")
	require.Equal(t, 2, c.KeyConcurrency)

	c, err = limits.Resolve("job", reg, &event.FlowControl{Group: "shared", Concurrency: 1, OnLimit: event.OnLimitCancelNewest}, in)
	require.NoError(t, err)
	require.Equal(t, &event.FlowControl{Group: "shared", Concurrency: 1, OnLimit: event.OnLimitCancelNewest}, c, "a start's control replaces the registration's")

	c, err = limits.Resolve("job", nil, nil, in)
	require.NoError(t, err)
	require.Nil(t, c)

	_, err = limits.Resolve("job", nil, &event.FlowControl{Key: "vip"}, in)
	require.ErrorContains(t, err, "registered without flow control")
	_, err = limits.Resolve("job", reg, nil, json.RawMessage(`{}`))
	require.True(t, errors.Is(err, limits.ErrNoKey))
	_, err = limits.Resolve("job", &event.FlowControl{KeyConcurrency: 1}, nil, in)
	require.ErrorContains(t, err, "no key path")
	_, err = limits.Resolve("job", &event.FlowControl{Rate: 5}, nil, in)
	require.ErrorContains(t, err, "rate_period")
	_, err = limits.Resolve("job", &event.FlowControl{Concurrency: 1, OnLimit: "drop"}, nil, in)
	require.ErrorContains(t, err, "on_limit")
}
