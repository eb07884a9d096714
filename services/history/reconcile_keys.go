package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/store"
)

// startKeyGrace is how long a start key may name a run without history before the reconciler
// releases it: far longer than a start takes between claiming its key and appending the run's
// run.started (the ingress bounds an input by 30 seconds), so that a start in flight never
// loses its key, and longer than the clocks of the server (which stamps the entry) and of this
// service differ.
const startKeyGrace = 5 * time.Minute

// reconcileStartKeys brings FLOW_START_KEYS in line with history: an entry names the run a
// later start of its key is given. An entry is released (deleted at the revision read, so that
// a start that replaced it meanwhile keeps its own) when it names a run that was deleted, or a
// run without history startKeyGrace after the key was claimed (its starter died before
// run.started, and no later start of the key started the run), when it is a debounce key whose
// run is past its delay or ended (its release, a consequence of that commit, was lost), and when
// it is not an entry at all. A dedup key of a run that exists stays until its window's TTL.
func (s *Service) reconcileStartKeys(ctx context.Context) (int, error) {
	keys, err := s.keys.List(ctx)
	if err != nil {
		return 0, err
	}
	now := s.cfg.Clock()
	repairs := 0
	for _, k := range keys {
		why, err := s.staleStartKey(ctx, k, now)
		if err != nil {
			return repairs, err
		}
		if why == "" {
			continue
		}
		deleted, err := s.keys.DeleteAt(ctx, k.Key, k.Revision)
		if err != nil {
			return repairs, err
		}
		if deleted {
			repairs++
			s.repaired(ctx, metrics.StateStartKeys, k.Entry.RunID, "start key "+k.Key+" "+why+": released")
		}
	}
	return repairs, nil
}

// staleStartKey says why entry k is to be released, or "" when it stays.
func (s *Service) staleStartKey(ctx context.Context, k jshost.StoredKey, now time.Time) (string, error) {
	if k.Malformed {
		return "holds no start key entry", nil
	}
	runID := k.Entry.RunID
	sum, indexed := s.index.get(runID)
	switch {
	case indexed && sum.Deleted != nil:
		return fmt.Sprintf("names run %q, which was deleted", runID), nil
	case indexed && sum.Seq > 0:
	case now.Sub(k.Created) < startKeyGrace:
		return "", nil // its start may still be on its way to run.started
	default:
		last, err := s.store.LastStreamSeq(ctx, runID)
		if err != nil {
			return "", err
		}
		if last == 0 {
			return fmt.Sprintf("names run %q, which has no history %s after the key was claimed", runID,
				now.Sub(k.Created).Round(time.Second)), nil
		}
	}
	if !strings.HasPrefix(k.Key, "debounce.") {
		return "", nil
	}
	if indexed && sum.Status.Terminal() {
		return fmt.Sprintf("is a debounce key of run %q, which ended", runID), nil
	}
	var why string
	err := s.onLane(ctx, runID, func(ctx context.Context, l *lane) error {
		var snap *core.Snapshot
		if f := l.cache.get(runID); f != nil && !f.s.Delayed {
			snap = f.s // a run's delay never comes back once fired
		} else {
			var err error
			if snap, err = l.latestSnapshot(ctx, runID); err != nil || snap == nil {
				return err
			}
		}
		switch {
		case snap.Terminal():
			why = fmt.Sprintf("is a debounce key of run %q, which ended", runID)
		case !snap.Delayed:
			why = fmt.Sprintf("is a debounce key of run %q, which is past its delay", runID)
		}
		return nil
	})
	if errors.Is(err, store.ErrDamaged) {
		return "", nil // quarantined: an operator decides
	}
	return why, err
}
