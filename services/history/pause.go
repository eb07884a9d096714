package history

import (
	"context"
	"log/slog"
	"strconv"
	"sync"

	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/internal/pauses"
)

// Definition and queue pauses (docs/pause.md). A worker parks a run that a FLOW_PAUSES entry
// holds, naming the pause in its FLOW_PARKED entry; this service dispatches every such run
// again once the pause is gone. It follows both buckets, and whichever change it sees last
// triggers the dispatch: the delete of a pause dispatches the runs parked for it that it knows
// of, and a parked entry that names a pause that is gone (deleted before the entry was written,
// or while no history service ran) is dispatched as it arrives, or when the entries are loaded
// at start. Both are durable, so a crash between any two of these writes leaves a state this
// reconciliation finds again; a run dispatched twice gets one task (the nonce is the parked
// entry's revision).

// startPauses follows FLOW_PAUSES, and returns once the pauses that exist are loaded.
func (p *parking) startPauses(ctx context.Context, wg *sync.WaitGroup) error {
	pauses, err := jshost.NewPauses(ctx, p.s.js, jshost.PausesOptions{Watch: true, Logger: p.s.logger,
		OnChange: func(key string, v *pauses.Pause) {
			if v == nil {
				p.released(ctx, key)
			}
		}})
	if err != nil {
		return err
	}
	p.pauses = pauses
	wg.Go(func() { <-ctx.Done(); pauses.Stop() })
	return nil
}

// heldByPause reports whether pr was parked for a pause that still holds it.
func (p *parking) heldByPause(pr parked.Run) bool {
	return pr.Pause != "" && p.pauses != nil && p.pauses.Active(pr.Pause)
}

// releasable reports whether pr was parked for a pause that is gone.
func (p *parking) releasable(pr parked.Run) bool {
	return pr.Pause != "" && p.pauses != nil && !p.pauses.Active(pr.Pause)
}

// released dispatches the runs parked for pause key, which is gone; with key "", those parked
// for any pause that is gone.
func (p *parking) released(ctx context.Context, key string) {
	p.mu.RLock()
	var due []parkedRun
	for _, pr := range p.parked {
		if (key == "" || pr.Pause == key) && p.releasable(pr.Run) {
			due = append(due, pr)
		}
	}
	p.mu.RUnlock()
	n := 0
	for _, pr := range due {
		if err := p.dispatchReleased(ctx, pr); err != nil {
			p.s.logger.Warn("dispatching a run held by a pause failed", slog.String("run_id", pr.RunID), slog.String("error", err.Error()))
			continue
		}
		n++
	}
	if n > 0 {
		p.s.logger.Info("dispatched the runs a pause held", slog.String("pause", key), slog.Int("runs", n))
	}
}

// dispatchReleased dispatches a run parked for a pause that is gone, under a nonce of its
// parked entry's revision.
func (p *parking) dispatchReleased(ctx context.Context, pr parkedRun) error {
	nonce := "p" + strconv.FormatUint(pr.rev, 10)
	if err := p.s.cfg.Faults.Hit(fault.PauseDispatchBeforeDelete); err != nil {
		// As if the service died between the task and the delete: the task is sent, the
		// entry stays (the run's next park or dispatch replaces it).
		return p.dispatch(ctx, pr.RunID, pr.Queue, pr.Build, pr.Seq, nonce, 0)
	}
	return p.dispatch(ctx, pr.RunID, pr.Queue, pr.Build, pr.Seq, nonce, pr.rev)
}
