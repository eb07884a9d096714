package history_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/ingresstest"
	"github.com/flowrun/flow/internal/natstest"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history"
	"github.com/flowrun/flow/services/ingress"
)

var errAwaiting = errors.New("the run awaits its signal")

// Client.Result never misses the commit that ends a run: every await is answered by a notice of
// that commit, none by the slow poll that stands in for a lost one. Signal round trips from a
// few clients at once, as in the signal benchmark (where 1 to 27 of 500 Results used to wait for
// the poll, a second).
func TestResultNeverMissesAnEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 300 round trips take 15 s on a machine with a load average of 15, and were seen to take
	// over 60 s (setup's deadline) under a heavier one, with no Result slower than a second:
	// the workload gets a deadline of its own.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const clients, perClient = 4, 75
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				id, err := b.Client.Start(ctx, "await", nil, &flow.StartOptions{RunID: fmt.Sprintf("await-%d-%d", c, i)})
				if err == nil {
					err = b.Client.Watch(ctx, id, 0, func(e event.Envelope) error {
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
				if _, err := b.Client.Signal(ctx, id, "go", i, nil); err != nil {
					errs <- err
					return
				}
				var out int
				if err := b.Client.Result(ctx, id, &out); err != nil || out != i {
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
	require.Zero(t, b.History.AwaitsByPoll(), "every Result was answered by a notice of the run's end")
}

// An end the slow poll reads while the notice of its commit is being delivered was not missed:
// the notice came (it is routed before the stream stores the commit), only the poll's read got
// there first. Under load, with reads that take a while, that race used to count as a lost
// notice, and TestResultNeverMissesAnEnd failed. Here the first read the poll asks for waits
// until the run has ended, so that the notice of its end comes during that read.
func TestPollRacingTheEndsNoticeMissesNothing(t *testing.T) {
	t.Parallel()
	srv := natstest.RunJetStream(t)
	const runID = "raced"
	pollReads := make(chan struct{})
	ended := make(chan struct{})
	var once sync.Once
	h, err := history.New(history.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	require.NoError(t, err)
	h.SetAwaitPoll(20*time.Millisecond, func(id string, polled bool) {
		if id == runID && polled {
			once.Do(func() {
				close(pollReads)
				<-ended
			})
		}
	})
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	ingresstest.Start(t, ingress.Config{Conn: natstest.Connect(t, srv), HTTPAddr: "off", Logger: quiet})
	startWorker(t, srv, registry(""))
	client := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	_, err = client.Start(ctx, "await", nil, &flow.StartOptions{RunID: runID})
	require.NoError(t, err)
	err = client.Watch(ctx, runID, 0, func(e event.Envelope) error {
		if e.Type() == event.TypeSignalAwaited {
			return errAwaiting
		}
		return nil
	})
	require.ErrorIs(t, err, errAwaiting)
	result := make(chan error, 1)
	go func() {
		var out int
		result <- client.Result(ctx, runID, &out)
	}()
	select {
	case <-pollReads:
	case <-ctx.Done():
		t.Fatal("the await never polled")
	}
	_, err = client.Signal(ctx, runID, "go", 7, nil)
	require.NoError(t, err)
	other := newClient(t, srv)
	for {
		hist, err := other.History(ctx, runID, 0)
		require.NoError(t, err)
		if hist[len(hist)-1].Type() == event.TypeRunCompleted {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the run did not end; history %v", hist)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(ended)
	require.NoError(t, <-result)
	require.Zero(t, h.AwaitsByPoll(), "the notice of the run's end came; the poll only read it first")
}
