package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/pkg/event"
)

// Start policies (docs/start-policies.md) decide what a start does with a run ID that is taken:
// OnConflict when the ID's latest run is active, Reuse when it ended. A run ID is a history
// stream's subject and nothing may follow a terminal event, so a start that reuses caller ID X
// starts a new run with the derived ID X=_n (event.ReuseRunID), n = 1, 2, ... Its run.started,
// appended create-only at sequence 0, is at once the new run and the durable pointer to it:
// there is no second write to lose. The latest run of X is the highest X=_n that exists (runs
// X=_1..X=_n all exist, as each is created only after the one before), followed through its
// continuations. Inputs addressed to X that X's run refuses because it ended follow to that run
// (forward), as they follow continuations.

// maxPolicyRounds bounds the rounds of a start that keeps losing races to other starts of its
// ID or key.
const maxPolicyRounds = 16

// ReuseRefusedError reports a start refused because the run ID's latest run ended and the
// start's reuse policy does not allow a new one. It matches ErrRunExists.
type ReuseRefusedError struct {
	// RunID is the caller's run ID; Latest the run of it that ended, with Outcome.
	RunID, Latest string
	Outcome       event.Outcome
	Policy        event.ReusePolicy
	// Deleted is set when the ID's latest run was deleted after its retention period.
	Deleted *store.DeletedError
}

func (e *ReuseRefusedError) Error() string {
	if e.Deleted != nil {
		return fmt.Sprintf("flow: run %q ended (%s, as run %q) and was deleted after its retention period; its ID is not taken again under reuse policy %q: "+
			"start with reuse policy allow (the new run is %q's next reuse, %s=_N), or choose another run ID", e.RunID, e.Outcome, e.Latest, e.policy(), e.RunID, e.RunID)
	}
	how := "refuses reusing an ended run's ID"
	if e.Policy == event.ReuseAllowFailedOnly {
		how = "allows a new run only after a failed or cancelled one"
	}
	return fmt.Sprintf("flow: run %q ended (%s, as run %q) and the start's reuse policy %q %s; start with reuse policy allow, or choose another run ID",
		e.RunID, e.Outcome, e.Latest, e.policy(), how)
}

func (e *ReuseRefusedError) policy() event.ReusePolicy {
	if e.Policy == "" {
		return event.ReuseRefuse
	}
	return e.Policy
}

// Is matches ErrRunExists.
func (e *ReuseRefusedError) Is(target error) bool { return target == ErrRunExists }

// Debounce asks for a debounced start: the starts with the same Key (per definition) within a
// quiet period of Period collapse into one run, started once Period has passed since the
// latest of them, with the latest one's input.
type Debounce struct {
	Key    string
	Period time.Duration
}

// ErrNoStartKeys is wrapped by the error of a start with a dedup key or a debounce when the
// engine has no start key index (Config.Keys).
var ErrNoStartKeys = errors.New("flow: this engine has no start key index (Config.Keys)")

// hasPolicy reports whether p asks for anything beyond a plain start.
func (p *StartParams) hasPolicy() bool {
	return p.OnConflict != "" || p.Reuse != "" || p.Delay != 0 || p.DedupKey != "" || p.DedupWindow != 0 || p.Debounce != nil
}

// maxKeyLength bounds dedup and debounce keys.
const maxKeyLength = 1024

// checkPolicy validates p's start policies and records them in started.
func (e *Engine) checkPolicy(p *StartParams, started *event.RunStarted) error {
	if !p.hasPolicy() {
		return nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", core.ErrInvalidInput, fmt.Sprintf(format, args...))
	}
	switch {
	case p.Parent != nil || p.ContinuedFrom != "":
		return bad("run %q is a child or a continuation: start policies apply to a caller's start only", p.RunID)
	case !p.OnConflict.Valid():
		return bad("conflict policy %q is not one of fail, use_existing, terminate_existing", p.OnConflict)
	case !p.Reuse.Valid():
		return bad("reuse policy %q is not one of refuse, allow, allow_failed_only", p.Reuse)
	case p.Delay < 0:
		return bad("start delay %v is negative; give a duration of zero or more", p.Delay)
	case p.DedupKey == "" && p.DedupWindow != 0:
		return bad("a dedup window (%v) needs a dedup key", p.DedupWindow)
	case p.DedupKey != "" && p.DedupWindow <= 0:
		return bad("dedup key %q needs a positive dedup window, such as 10m", p.DedupKey)
	case len(p.DedupKey) > maxKeyLength:
		return bad("the dedup key is %d bytes long; the limit is %d", len(p.DedupKey), maxKeyLength)
	case p.Debounce != nil && (p.Debounce.Key == "" || len(p.Debounce.Key) > maxKeyLength):
		return bad("a debounce needs a key of 1 to %d bytes", maxKeyLength)
	case p.Debounce != nil && p.Debounce.Period <= 0:
		return bad("debounce key %q needs a positive quiet period, such as 30s", p.Debounce.Key)
	case p.Debounce != nil && p.Delay != 0:
		return bad("a debounced start is delayed by its quiet period; drop the start delay (%v)", p.Delay)
	case p.Debounce != nil && p.DedupKey != "":
		return bad("a start is either debounced or deduplicated, not both")
	case (p.DedupKey != "" || p.Debounce != nil) && e.keys == nil:
		return ErrNoStartKeys
	}
	sp := &event.StartPolicy{OnConflict: p.OnConflict, Reuse: p.Reuse, Delay: event.Duration(p.Delay),
		DedupKey: p.DedupKey, DedupWindow: event.Duration(p.DedupWindow)}
	if p.Debounce != nil {
		sp.Debounce = &event.Debounce{Key: p.Debounce.Key, Period: event.Duration(p.Debounce.Period)}
		sp.Delay = event.Duration(p.Debounce.Period)
	}
	sp.RequestID = p.RequestID
	started.StartPolicy = sp
	return nil
}

// delay returns the start delay p asks for: its Delay, or its debounce's quiet period.
func (p *StartParams) delay() time.Duration {
	if p.Debounce != nil {
		return p.Debounce.Period
	}
	return p.Delay
}

// appendStart appends started as the first event of run runID, recorded at the engine's clock,
// with its NotBefore at that time plus delay. On success it sends the resume task of a run that
// is not delayed, as a fast path the history service repeats.
func (e *Engine) appendStart(ctx context.Context, runID string, p *StartParams, started *event.RunStarted) error {
	if err := e.faults.Hit(fault.StoreAppend); err != nil {
		return fmt.Errorf("appending run.started: %w", err)
	}
	at := e.clock.Now().UTC()
	started.NotBefore = time.Time{}
	if d := p.delay(); d > 0 {
		started.NotBefore = at.Add(d)
	}
	_, err := e.store.Append(ctx, runID, 0, event.Event{Time: at, Payload: started})
	countAppend(ctx, err)
	if err != nil {
		return err
	}
	e.logger.DebugContext(ctx, "run started", slog.String("run_id", runID), slog.String("definition", p.Spec.Definition))
	if !started.NotBefore.IsZero() {
		// Its start timer follows from the commit: the history service registers it, and the
		// scheduler learns of it from the commit as it is published.
		return nil
	}
	e.resumeStarted(ctx, Task{RunID: runID, Queue: p.Queue, Build: p.Spec.BuildID, Seq: 1, TraceParent: started.TraceParent,
		Head: e.commitHead(runID, []event.Envelope{{RunID: runID, Seq: 1, Time: at, Payload: started}})})
	return nil
}

// startWithPolicy starts the run p describes under its start policies. started is p's
// run.started, prepared and checked.
func (e *Engine) startWithPolicy(ctx context.Context, p StartParams, started *event.RunStarted) (string, bool, error) {
	switch {
	case p.DedupKey != "":
		return e.startDedup(ctx, p, started)
	case p.Debounce != nil:
		return e.startDebounced(ctx, p, started)
	}
	return e.startOrApply(ctx, p, started)
}

// startOrApply starts run p.RunID, or, if the ID is taken, applies p's conflict or reuse policy.
func (e *Engine) startOrApply(ctx context.Context, p StartParams, started *event.RunStarted) (string, bool, error) {
	err := e.appendStart(ctx, p.RunID, &p, started)
	if err == nil {
		return p.RunID, true, nil
	}
	if !errors.Is(err, store.ErrConflict) {
		return "", false, fmt.Errorf("appending run.started: %w", err)
	}
	return e.onTaken(ctx, p, started)
}

// idChain is what a taken caller run ID leads to.
type idChain struct {
	// n is the number of the latest reuse of the ID (0: the ID's first run); root is the run
	// started under that number (the ID itself, or event.ReuseRunID(ID, n)), and rootStarted
	// its run.started.
	n           int
	root        string
	rootStarted *event.RunStarted
	// latest is the snapshot of root's last continuation (root itself when it did not continue).
	latest *core.Snapshot
	// deleted is set when root's history was deleted after its retention period: rootStarted
	// is nil then.
	deleted *store.DeletedError
}

// onTaken applies p's conflict policy (the ID's latest run is active) or reuse policy (it
// ended) to a start of the taken caller ID p.RunID.
func (e *Engine) onTaken(ctx context.Context, p StartParams, started *event.RunStarted) (string, bool, error) {
	for range maxPolicyRounds {
		c, err := e.chainOf(ctx, p.RunID)
		if err != nil {
			return "", false, err
		}
		if c.deleted != nil && c.latest.Terminal() && p.Reuse != event.ReuseAllow && p.Reuse != event.ReuseAllowFailedOnly {
			// Its start is deleted with it, so a repeat cannot be told from another start: the
			// ID is never taken again but under a reuse policy that allows it.
			return c.root, false, &ReuseRefusedError{RunID: p.RunID, Latest: c.latest.RunID, Outcome: c.latest.Outcome.Outcome,
				Policy: p.Reuse, Deleted: c.deleted}
		}
		if rp := c.startPolicy(); p.RequestID != "" && rp != nil && rp.RequestID == p.RequestID {
			return c.root, false, nil // a retry of the request that started it
		}
		var sp event.StartPolicy // this round's record, in a copy
		if started.StartPolicy != nil {
			sp = *started.StartPolicy
		}
		sp.RunID, sp.Previous, sp.Replaces = p.RunID, c.latest.RunID, false
		if !c.latest.Terminal() {
			switch p.OnConflict {
			case event.ConflictUseExisting:
				return c.root, false, nil
			case event.ConflictTerminateExisting:
				sp.Replaces = true
			default:
				if c.rootStarted == nil {
					return c.root, false, fmt.Errorf("%w: run %q was deleted after its retention period and its chain goes on in the active run %q; "+
						"a start cannot be compared with the deleted one's: start with conflict policy use_existing or terminate_existing, or choose another run ID",
						ErrRunExists, c.root, c.latest.RunID)
				}
				if err := compareStart(c.root, c.rootStarted, started, false); err != nil {
					return c.root, false, err
				}
				return c.root, false, nil
			}
		} else {
			o := c.latest.Outcome.Outcome
			switch p.Reuse {
			case event.ReuseAllow:
			case event.ReuseAllowFailedOnly:
				if o == event.OutcomeCompleted {
					return c.root, false, &ReuseRefusedError{RunID: p.RunID, Latest: c.latest.RunID, Outcome: o, Policy: p.Reuse}
				}
			default:
				// A repeated start returns the run; another is refused, as it always was.
				return c.root, false, compareStart(c.root, c.rootStarted, started, false)
			}
		}
		next := event.ReuseRunID(p.RunID, c.n+1)
		again := *started
		again.StartPolicy = &sp
		err = e.appendStart(ctx, next, &p, &again)
		if errors.Is(err, store.ErrConflict) {
			continue // another start of the ID took that number: decide again
		}
		if err != nil {
			return "", false, fmt.Errorf("appending run.started: %w", err)
		}
		if sp.Replaces {
			if err := e.faults.Hit(fault.AfterStartBeforeReplace); err != nil {
				// The history service terminates the replaced run when it applies the start.
				return next, true, nil
			}
			if err := e.replace(ctx, sp.Previous, next); err != nil {
				e.logger.WarnContext(ctx, "the replaced run was not terminated; the history service terminates it",
					slog.String("run_id", sp.Previous), slog.String("replaced_by", next), slog.String("error", err.Error()))
			}
		}
		return next, true, nil
	}
	return "", false, fmt.Errorf("starting run %q: other starts of the ID kept winning; retry", p.RunID)
}

// replace terminates run old, which run by replaced under the conflict policy
// terminate_existing, or, if old continued as new meanwhile, its latest continuation. A run
// that already ended otherwise is left alone, and so is one that retention deleted since (it
// ended before its deletion; its tombstone names its continuation, if any). Idempotent.
func (e *Engine) replace(ctx context.Context, old, by string) error {
	reason := fmt.Sprintf("replaced by run %q (start policy %s)", by, event.ConflictTerminateExisting)
	for range maxGenerations {
		err := e.external(ctx, old, func(s *core.Snapshot) ([]event.Payload, error) {
			return core.Terminate(s, reason)
		})
		var de *store.DeletedError
		switch {
		case errors.As(err, &de):
			s, err := core.DeletedSnapshot(old, de.Seq, de.Time, de.Deletion)
			if err != nil {
				return err
			}
			if s.Outcome.Outcome != event.OutcomeContinuedAsNew || s.Outcome.SuccessorRunID == "" {
				return nil
			}
			old = s.Outcome.SuccessorRunID
			continue
		case !errors.Is(err, core.ErrTerminal):
			return err
		}
		s, err := e.snapshot(ctx, old, 1)
		if err != nil {
			return err
		}
		if s.Outcome.Outcome != event.OutcomeContinuedAsNew {
			return nil
		}
		if err := e.startSuccessor(ctx, s); err != nil {
			return err
		}
		old = s.Outcome.SuccessorRunID
	}
	return fmt.Errorf("run %q continued as new more than %d times while it was being replaced", old, maxGenerations)
}

// chainOf resolves taken caller run ID id to its latest run. It returns an error wrapping
// core.ErrNotFound if the ID has no run.
func (e *Engine) chainOf(ctx context.Context, id string) (idChain, error) {
	n, err := e.lastReuse(ctx, id)
	if err != nil {
		return idChain{}, err
	}
	c := idChain{n: n, root: id}
	if n > 0 {
		c.root = event.ReuseRunID(id, n)
	}
	hist, err := e.store.LoadAtLeast(ctx, c.root, 0, 1)
	var de *store.DeletedError
	if errors.As(err, &de) {
		// Deleted after its retention period: an ended run whose start is not kept.
		s, err := core.DeletedSnapshot(c.root, de.Seq, de.Time, de.Deletion)
		if err != nil {
			return idChain{}, err
		}
		c.deleted = de
		c.latest, err = e.lastGenerationFrom(ctx, s)
		return c, err
	}
	if err != nil {
		return idChain{}, fmt.Errorf("loading run %q: %w", c.root, err)
	}
	if len(hist) == 0 {
		return idChain{}, fmt.Errorf("%w: run %q", core.ErrNotFound, c.root)
	}
	var ok bool
	if c.rootStarted, ok = hist[0].Payload.(*event.RunStarted); !ok {
		return idChain{}, fmt.Errorf("%w: run %q does not begin with run.started", core.ErrInvalidHistory, c.root)
	}
	s, err := core.Project(c.root, hist)
	if err != nil {
		return idChain{}, err
	}
	c.latest, err = e.lastGenerationFrom(ctx, s)
	return c, err
}

// lastGeneration returns the snapshot of the run run runID's chain goes on in: its last
// continuation, or the new run of its latest reset, followed through each other's, writing a
// successor or a reset's new run that its predecessor's end implies and that is not written
// yet.
func (e *Engine) lastGeneration(ctx context.Context, runID string) (*core.Snapshot, error) {
	s, err := e.followable(ctx, runID, 1)
	if err != nil {
		return nil, err
	}
	return e.lastGenerationFrom(ctx, s)
}

// lastGenerationFrom is lastGeneration from s, a run's snapshot. A deleted run in the chain is
// followed through its record (its continuation or reset, when the record names it).
func (e *Engine) lastGenerationFrom(ctx context.Context, s *core.Snapshot) (*core.Snapshot, error) {
	for range maxGenerations {
		if next, ok := resetTarget(s); ok && s.Terminal() {
			ns, err := e.followable(ctx, next, 1)
			if errors.Is(err, core.ErrNotFound) && s.DeletedSeq == 0 {
				// Recorded, not written yet: write it, as the history service would.
				if err = e.startReset(ctx, s.RunID, next); err == nil {
					ns, err = e.followable(ctx, next, 1)
				}
			}
			if err != nil {
				return nil, err
			}
			s = ns
			continue
		}
		if s.Outcome == nil || s.Outcome.Outcome != event.OutcomeContinuedAsNew || s.DeletedSeq > 0 && s.Outcome.SuccessorRunID == "" {
			return s, nil
		}
		if s.DeletedSeq == 0 {
			if err := e.startSuccessor(ctx, s); err != nil {
				return nil, err
			}
		}
		next, err := e.followable(ctx, s.Outcome.SuccessorRunID, 1)
		if err != nil {
			return nil, err
		}
		s = next
	}
	return nil, fmt.Errorf("run %q continued as new or was reset more than %d times", s.RunID, maxGenerations)
}

// lastReuse returns the number of the latest run that reuses caller ID id (0 when none does).
// Runs id=_1..id=_n exist and none after, so it probes with a doubling and then a halving
// search: about 2·log2(n) reads of a run's last commit.
func (e *Engine) lastReuse(ctx context.Context, id string) (int, error) {
	exists := func(n int) (bool, error) { return e.exists(ctx, event.ReuseRunID(id, n)) }
	ok, err := exists(1)
	if err != nil || !ok {
		return 0, err
	}
	lo, hi := 1, 2
	for {
		ok, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// lastCommitter is implemented by stores that read a run's last commit without its history
// (jsstore: one direct get).
type lastCommitter interface {
	LastCommit(ctx context.Context, runID string) ([]event.Envelope, error)
}

// exists reports whether run runID has a history.
func (e *Engine) exists(ctx context.Context, runID string) (bool, error) {
	if lc, ok := e.store.(lastCommitter); ok {
		c, err := lc.LastCommit(ctx, runID)
		return len(c) > 0, err
	}
	h, err := e.store.Load(ctx, runID, 0)
	return len(h) > 0, err
}

// laterReuse returns the run that reuses the caller ID of ended run runID after it, if any.
func (e *Engine) laterReuse(ctx context.Context, runID string) (string, bool, error) {
	id, n, ok := event.ReuseFamily(runID)
	if !ok {
		return "", false, nil
	}
	m, err := e.lastReuse(ctx, id)
	if err != nil || m <= n {
		return "", false, err
	}
	return event.ReuseRunID(id, m), true, nil
}

// LatestRun returns the latest run of run ID runID: the last continuation of the latest run
// that reuses its caller ID (runID's own chain when none does). It returns an error wrapping
// core.ErrNotFound if runID has no run.
func (e *Engine) LatestRun(ctx context.Context, runID string) (string, error) {
	if ok, err := e.exists(ctx, runID); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: run %q", core.ErrNotFound, runID)
		}
		return "", err
	}
	for range maxGenerations {
		s, err := e.lastGeneration(ctx, runID)
		if err != nil {
			return "", err
		}
		if !s.Terminal() {
			return s.RunID, nil
		}
		next, ok, err := e.laterReuse(ctx, s.RunID)
		if err != nil {
			return "", err
		}
		if !ok {
			return s.RunID, nil
		}
		runID = next
	}
	return "", fmt.Errorf("run %q: too many runs reuse its ID", runID)
}

// applyStartPolicy carries out what a commit of run s.RunID implies for its start policies
// (called by ApplyCommit): the run a terminate_existing start replaced is terminated, and the
// debounce key of a run whose delay fired (or that ended delayed) is released.
func (e *Engine) applyStartPolicy(ctx context.Context, s *core.Snapshot, commit []event.Envelope) error {
	sp := s.StartPolicy
	if sp == nil {
		return nil
	}
	for _, ev := range commit {
		switch ev.Payload.(type) {
		case *event.RunStarted:
			if sp.Replaces {
				if err := e.replace(ctx, sp.Previous, s.RunID); err != nil {
					return fmt.Errorf("terminating run %q, which run %q replaces: %w", sp.Previous, s.RunID, err)
				}
			}
		case *event.RunDelayFired:
			if err := e.releaseDebounce(ctx, s); err != nil {
				return err
			}
		}
		if ev.Type().Terminal() && s.Delayed {
			if err := e.releaseDebounce(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// startPolicy returns the start policy the chain's root was started with; nil when it had none
// or its history was deleted.
func (c idChain) startPolicy() *event.StartPolicy {
	if c.rootStarted == nil {
		return nil
	}
	return c.rootStarted.StartPolicy
}
