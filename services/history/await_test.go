package history_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

var errAwaiting = errors.New("the run awaits its signal")

// Client.Result never misses the commit that ends a run: every await is answered by a notice of
// that commit, none by the slow poll that stands in for a lost one. Signal round trips from a
// few clients at once, as in the signal benchmark (where 1 to 27 of 500 Results used to wait for
// the poll, a second).
func TestResultNeverMissesAnEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const clients, perClient = 4, 75
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				id, err := b.client.Start(b.ctx, "await", nil, &flow.StartOptions{RunID: fmt.Sprintf("await-%d-%d", c, i)})
				if err == nil {
					err = b.client.Watch(b.ctx, id, 0, func(e event.Envelope) error {
						if e.Type() == event.TypeSignalAwaited {
							return errAwaiting
						}
						return nil
					})
				}
				if !errors.Is(err, errAwaiting) {
					errs <- fmt.Errorf("run %s: %v", id, err)
					return
				}
				if _, err := b.client.Signal(b.ctx, id, "go", i, nil); err != nil {
					errs <- err
					return
				}
				var out int
				if err := b.client.Result(b.ctx, id, &out); err != nil || out != i {
					errs <- fmt.Errorf("run %s: %d, %v", id, out, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, b.history.AwaitsByPoll(), "every Result was answered by a notice of the run's end")
}
