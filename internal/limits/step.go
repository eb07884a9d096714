package limits

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/core"
)

// StepLimit caps the attempts of one step name, shared by every worker (core.StepLimit, which
// the SDK declares).
type StepLimit = core.StepLimit

// StepState is the FLOW_LIMITS entry of one limited step name.
type StepState struct {
	// Holders are the attempts in flight, by attempt key ("<run>/<step>/<attempt>"), each with
	// the end of its lease: the worker running it renews the lease, and a lease that ran out
	// (its worker died) frees the slot.
	Holders map[string]time.Time `json:"holders,omitempty"`
	// Log lists the starts of the last Period, oldest first.
	Log []time.Time `json:"log,omitempty"`
	// Waiting lists the attempts that found no slot, by attempt key: they wait, their tasks
	// redelivered later, without holding a worker. A waiter of higher priority goes first.
	Waiting map[string]StepWaiter `json:"waiting,omitempty"`
}

// StepWaiter is an attempt waiting for a slot.
type StepWaiter struct {
	Priority int `json:"priority,omitempty"`
	// Since is when it first found no slot; Seen when it last asked (a waiter that stops asking
	// is dropped).
	Since time.Time `json:"since"`
	Seen  time.Time `json:"seen"`
	// Why says what keeps it waiting.
	Why string `json:"why"`
}

// stepLease is how long a slot is held without renewal; the runner renews it every third of it.
const stepLease = 30 * time.Second

// waiterTTL is how long a waiter that stopped asking keeps its place.
const waiterTTL = 10 * time.Second

// StepLimiter takes and releases step slots in FLOW_LIMITS for the worker's engine.
type StepLimiter struct {
	store  *Store
	limits func(step string) (StepLimit, bool)
	now    func() time.Time
}

// NewStepLimiter returns a limiter of the steps limits names (ok false for an unlimited step).
func NewStepLimiter(store *Store, limits func(step string) (StepLimit, bool)) *StepLimiter {
	return &StepLimiter{store: store, limits: limits, now: func() time.Time { return time.Now().UTC() }}
}

// Limited reports whether step name has a limit.
func (l *StepLimiter) Limited(step string) bool {
	_, ok := l.limits(step)
	return ok
}

// Acquire takes a slot for attempt key (see StepState.Holders) of step with priority. It returns
// a release function once taken, or, when no slot is free, how long to wait and why; the
// attempt is then listed as waiting, for `flow limits` and the UI.
func (l *StepLimiter) Acquire(ctx context.Context, step, key string, priority int) (release func(), wait time.Duration, why string, err error) {
	lim, ok := l.limits(step)
	if !ok {
		return func() {}, 0, "", nil
	}
	var got bool
	err = l.store.updateStep(ctx, step, func(st *StepState) bool {
		now := l.now()
		got, wait, why = st.take(lim, key, priority, now)
		return true
	})
	if err != nil || !got {
		return nil, wait, why, err
	}
	stop := make(chan struct{})
	var once sync.Once
	go l.renew(context.WithoutCancel(ctx), step, key, stop)
	return func() {
		once.Do(func() {
			close(stop)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = l.store.updateStep(rctx, step, func(st *StepState) bool {
				if _, ok := st.Holders[key]; !ok {
					return false
				}
				delete(st.Holders, key)
				return true
			})
		})
	}, 0, "", nil
}

// renew extends the lease of attempt key's slot until stop closes.
func (l *StepLimiter) renew(ctx context.Context, step, key string, stop chan struct{}) {
	t := time.NewTicker(stepLease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			_ = l.store.updateStep(ctx, step, func(st *StepState) bool {
				if _, ok := st.Holders[key]; !ok {
					return false
				}
				st.Holders[key] = l.now().Add(stepLease)
				return true
			})
		}
	}
}

// take tries to take a slot for attempt key at now; when it cannot, it lists the attempt as
// waiting and says how long to wait and why.
func (st *StepState) take(lim StepLimit, key string, priority int, now time.Time) (bool, time.Duration, string) {
	for k, until := range st.Holders {
		if now.After(until) {
			delete(st.Holders, k) // its worker died: the slot is free
		}
	}
	for k, w := range st.Waiting {
		if now.Sub(w.Seen) > waiterTTL {
			delete(st.Waiting, k)
		}
	}
	if lim.Period > 0 {
		i := 0
		for i < len(st.Log) && now.Sub(st.Log[i]) > lim.Period {
			i++
		}
		st.Log = slices.Delete(st.Log, 0, i)
	}
	if _, held := st.Holders[key]; held {
		return true, 0, ""
	}
	why, wait := "", time.Duration(0)
	switch {
	case lim.Concurrency > 0 && len(st.Holders) >= lim.Concurrency:
		why = fmt.Sprintf("all %d slots of the step's concurrency limit are in use", lim.Concurrency)
		wait = time.Duration(100+rand.IntN(400)) * time.Millisecond
	case lim.Rate > 0 && len(st.Log) >= lim.Rate:
		oldest := st.Log[len(st.Log)-lim.Rate]
		wait = oldest.Add(lim.Period).Sub(now) + time.Millisecond
		why = fmt.Sprintf("the step's rate limit of %d per %s is spent for %s", lim.Rate, lim.Period, wait.Round(time.Millisecond))
	default:
		for k, w := range st.Waiting {
			if k != key && w.Priority > priority {
				why = fmt.Sprintf("an attempt of higher priority (%d) waits for the slot", w.Priority)
				wait = time.Duration(50+rand.IntN(100)) * time.Millisecond
				break
			}
		}
	}
	if why != "" {
		if st.Waiting == nil {
			st.Waiting = map[string]StepWaiter{}
		}
		w, ok := st.Waiting[key]
		if !ok {
			w.Since = now
		}
		w.Priority, w.Seen, w.Why = priority, now, why
		st.Waiting[key] = w
		return false, wait, why
	}
	if st.Holders == nil {
		st.Holders = map[string]time.Time{}
	}
	st.Holders[key] = now.Add(stepLease)
	if lim.Rate > 0 {
		st.Log = append(st.Log, now)
	}
	delete(st.Waiting, key)
	return true, 0, ""
}

// updateStep applies change to step's state by compare-and-set, again after a conflict.
func (s *Store) updateStep(ctx context.Context, step string, change func(*StepState) bool) error {
	for {
		st, rev, err := load(ctx, s.steps, StepKey(step))
		if err != nil {
			return err
		}
		if !change(st) {
			return nil
		}
		_, err = save(ctx, s.steps, StepKey(step), st, rev)
		if err == nil || !isConflict(err) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// LoadStep returns step's state, for operators' views.
func (s *Store) LoadStep(ctx context.Context, step string) (*StepState, error) {
	st, _, err := load(ctx, s.steps, StepKey(step))
	return st, err
}

// AttemptKey is the key of attempt attempt of step stepID of run runID among a step's holders
// and waiters.
func AttemptKey(runID, stepID string, attempt int) string {
	return fmt.Sprintf("%s/%s/%d", runID, stepID, attempt)
}
