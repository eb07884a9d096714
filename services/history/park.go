package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/definitions"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/parked"
)

// parking keeps the runs workers asked this service to park (FLOW_PARKED, written by parkRun) and
// dispatches parked and blocked runs again when a worker registers a definition that can drive
// them (FLOW_DEFINITIONS).
type parking struct {
	s *Service

	mu     sync.RWMutex
	parked map[string]parkedRun
	// latest holds the latest registration of each definition, by definitions.Key, and
	// latestRev its FLOW_DEFINITIONS revision.
	latest    map[string]definitions.Definition
	latestRev map[string]uint64
	// pauses follows FLOW_PAUSES (pause.go).
	pauses *jshost.Pauses
}

type parkedRun struct {
	parked.Run
	rev uint64
}

func newParking(s *Service) *parking {
	return &parking{s: s, parked: map[string]parkedRun{}, latest: map[string]definitions.Definition{}, latestRev: map[string]uint64{}}
}

// revision returns the FLOW_PARKED revision of run runID's entry, or 0.
func (p *parking) revision(runID string) uint64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.parked[runID].rev
}

// reason returns why no worker drives the run of index entry sum now, or "": a worker parked
// it, or it is pinned to a build that the latest worker of its queue to register its definition
// does not run (its tasks wait for a worker of its build).
func (p *parking) reason(sum core.Summary) string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if r := p.parked[sum.RunID].Reason; r != "" {
		return r
	}
	if sum.Status.Terminal() || sum.BuildID == "" {
		return ""
	}
	d, ok := p.latest[definitions.Key(sum.Queue, sum.Definition)]
	if !ok || d.BuildID == sum.BuildID {
		return ""
	}
	return fmt.Sprintf("pinned to build %q; waiting for a worker of that build (the latest worker of queue %q to register %q runs build %q)",
		sum.BuildID, queueName(sum.Queue), sum.Definition, d.BuildID)
}

// start watches FLOW_PARKED and FLOW_DEFINITIONS, and returns once the parked runs are known.
func (p *parking) start(ctx context.Context, wg *sync.WaitGroup) error {
	if err := p.startPauses(ctx, wg); err != nil {
		return err
	}
	parkedW, err := p.s.parked.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watching parked runs: %w", err)
	}
	defsW, err := p.s.defs.Watch(ctx)
	if err != nil {
		_ = parkedW.Stop()
		return fmt.Errorf("watching definitions: %w", err)
	}
	ready := make(chan struct{})
	wg.Go(func() {
		defer func() { _ = parkedW.Stop(); _ = defsW.Stop() }()
		parkedUpdates, defsUpdates := parkedW.Updates(), defsW.Updates()
		var defs []definitions.Definition // registrations seen before the parked runs were known
		loaded := false
		for parkedUpdates != nil || defsUpdates != nil {
			select {
			case e, ok := <-parkedUpdates:
				switch {
				case !ok:
					parkedUpdates = nil
				case e == nil:
					loaded = true
					close(ready)
					for _, d := range defs {
						p.registered(ctx, d, 0)
					}
					defs = nil
					p.released(ctx, "") // runs parked for pauses that ended while no history service ran
				default:
					p.apply(ctx, e, loaded)
				}
			case e, ok := <-defsUpdates:
				switch {
				case !ok:
					defsUpdates = nil
				case e == nil || e.Deleted || e.Err != nil:
				default:
					d := e.Value
					p.mu.Lock()
					p.latest[e.Key], p.latestRev[e.Key] = d, e.Revision
					p.mu.Unlock()
					if !loaded {
						defs = append(defs, d)
						continue
					}
					p.registered(ctx, d, e.Revision)
				}
			case <-ctx.Done():
				return
			}
		}
	})
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// apply folds one FLOW_PARKED change in and brings the run's index entry up to date. Once
// the parked runs are loaded, a run parked before a registration that can drive it, which this
// service applied first (the two buckets' changes arrive in either order), is dispatched at once.
func (p *parking) apply(ctx context.Context, e *parked.Entry, loaded bool) {
	runID := e.Key
	p.mu.Lock()
	var late *parkedRun // parked before the latest registration that can drive it
	var lateRev uint64
	var unheld *parkedRun // parked for a pause that is gone
	if !e.Deleted {
		if e.Err != nil {
			p.mu.Unlock()
			return
		}
		pr := e.Value
		p.parked[runID] = parkedRun{Run: pr, rev: e.Revision}
		k := definitions.Key(pr.Queue, pr.Definition)
		if loaded && p.releasable(pr) {
			unheld = &parkedRun{Run: pr, rev: e.Revision}
		} else if d, ok := p.latest[k]; ok && loaded && (pr.Build == "" || pr.Build == d.BuildID) && pr.ParkedAt.Before(d.UpdatedAt) {
			late, lateRev = &parkedRun{Run: pr, rev: e.Revision}, p.latestRev[k]
		}
	} else {
		delete(p.parked, runID)
	}
	p.mu.Unlock()
	if unheld != nil {
		if err := p.dispatchReleased(ctx, *unheld); err != nil {
			p.s.logger.Warn("dispatching a run held by a pause failed", slog.String("run_id", runID), slog.String("error", err.Error()))
		}
	}
	if late != nil {
		// The nonce of the registration's own dispatch: a run it dispatched already gets no second task.
		if err := p.dispatch(ctx, runID, late.Queue, late.Build, late.Seq, "d"+strconv.FormatUint(lateRev, 10), late.rev); err != nil {
			p.s.logger.Warn("dispatching a parked run failed", slog.String("run_id", runID), slog.String("error", err.Error()))
		}
	}
	if p.s.consuming.Load() { // before, showParked writes the entry once the lanes run
		p.reindex(ctx, runID)
	}
}

// showParked brings up to date, once the lanes run, the index entries that do not say why
// their run is parked: a run parked, or a registration made, while no history service ran gets
// no commit that would write the run's entry.
func (p *parking) showParked(ctx context.Context) {
	for _, sum := range p.s.index.where(func(sum core.Summary) bool { return sum.Damaged == "" && p.reason(sum) != sum.Parked }) {
		p.reindex(ctx, sum.RunID)
	}
}

// reindex brings run runID's index entry up to date on its lane; a failure is logged, and the
// run's next commit or dispatch writes the entry again.
func (p *parking) reindex(ctx context.Context, runID string) {
	err := p.s.onLane(ctx, runID, func(ctx context.Context, l *lane) error { return l.reindex(ctx, runID) })
	if err != nil && ctx.Err() == nil {
		p.s.logger.Warn("the runs index entry of a parked run is not up to date", slog.String("run_id", runID), slog.String("error", err.Error()))
	}
}

// registered dispatches the runs a worker registering definition d can drive: those parked for
// want of it, and those blocked (the worker may run fixed code). rev, the registration's
// revision in FLOW_DEFINITIONS, makes the tasks of one registration distinct from those of the
// next, and the same on every replica.
func (p *parking) registered(ctx context.Context, d definitions.Definition, rev uint64) {
	canDrive := func(queue, definition, build string) bool {
		return queue == d.Queue && definition == d.Definition && (build == "" || build == d.BuildID)
	}
	nonce := "d" + strconv.FormatUint(rev, 10)
	if rev == 0 {
		nonce = "d" + strconv.FormatInt(d.UpdatedAt.UnixNano(), 36)
	}
	p.mu.RLock()
	var parked []parkedRun
	for _, pr := range p.parked {
		if canDrive(pr.Queue, pr.Definition, pr.Build) && pr.ParkedAt.Before(d.UpdatedAt) && !p.heldByPause(pr.Run) {
			parked = append(parked, pr)
		}
	}
	p.mu.RUnlock()
	blocked := p.s.index.where(func(sum core.Summary) bool {
		return sum.Status == core.StatusBlocked && canDrive(queueName(sum.Queue), sum.Definition, sum.BuildID) && sum.UpdatedAt.Before(d.UpdatedAt)
	})
	n := 0
	for _, pr := range parked {
		if err := p.dispatch(ctx, pr.RunID, pr.Queue, pr.Build, pr.Seq, nonce, pr.rev); err != nil {
			p.s.logger.Warn("dispatching a parked run failed", slog.String("run_id", pr.RunID), slog.String("error", err.Error()))
			continue
		}
		n++
	}
	for _, sum := range blocked {
		if err := p.dispatch(ctx, sum.RunID, sum.Queue, sum.BuildID, sum.Seq, nonce, 0); err != nil {
			p.s.logger.Warn("dispatching a blocked run failed", slog.String("run_id", sum.RunID), slog.String("error", err.Error()))
			continue
		}
		n++
	}
	if n > 0 {
		p.s.logger.Info("dispatched parked runs again", slog.String("definition", d.Definition), slog.String("queue", d.Queue),
			slog.String("build_id", d.BuildID), slog.Int("runs", n))
	}
	if rev == 0 || !p.s.consuming.Load() {
		return
	}
	// The registration changes which pinned runs of the definition wait for their build.
	for _, sum := range p.s.index.where(func(sum core.Summary) bool {
		return !sum.Status.Terminal() && sum.BuildID != "" && queueName(sum.Queue) == d.Queue && sum.Definition == d.Definition
	}) {
		p.reindex(ctx, sum.RunID)
	}
}

// dispatch sends run runID (on queue, pinned to build) a task under nonce and, if it was parked
// at revision parkedRev,
// removes its FLOW_PARKED entry (a worker that still cannot drive it parks it again).
func (p *parking) dispatch(ctx context.Context, runID, queue, build string, seq uint64, nonce string, parkedRev uint64) error {
	if err := p.s.host.Resume(ctx, engine.Task{RunID: runID, Queue: queue, Build: build, Seq: seq, Nonce: nonce}); err != nil {
		return err
	}
	if parkedRev == 0 {
		return nil
	}
	err := p.s.parked.Delete(ctx, runID, parkedRev)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	return nil
}

// reindex brings the index entry of run runID up to date, on its lane.
func (l *lane) reindex(ctx context.Context, runID string) error {
	f := l.cache.get(runID)
	if f == nil {
		var err error
		if f, _, err = l.load(ctx, runID, 0); err != nil {
			return err
		}
	}
	return l.s.writeIndex(ctx, runID, f)
}
