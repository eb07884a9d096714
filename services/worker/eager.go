package worker

import (
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
)

// Eager start (api.EagerPrefix): the ingress offers each new run to a worker of its queue and
// build before it queues the run's first task, and queues it only if no worker takes the offer.
// A worker with a free run slot takes it: it answers on the run's driving subject, sends the
// run's task itself, marked Offered, answers the ingress, and drives the run at once, as its
// first writer, committing nothing before the task is stored (Task.Backing). So the run's task
// exists before the run goes on, and a worker that dies driving the run loses nothing. The task:
//   - reaching the worker that drives the run, is adopted by the drive: kept unacknowledged, with
//     heartbeats, until the drive ends, then acknowledged, or handed back to the queue at once
//     when the drive stopped early (a park, a step limit, an error), for its own handling;
//   - reaching another worker while the run is driven, is left for later (offeredRecheck);
//   - reaching a worker when no one drives the run, is driven as a task that may have had a
//     writer before (never as the run's first writer).

// drivingAskTimeout bounds the question whether another worker drives an offered run: a worker
// that does answers at once, and none at all answers "no responders" at once.
const drivingAskTimeout = 2 * time.Second

// serveOffers subscribes to the offers of new runs of the worker's queue, for each of builds.
func (w *Worker) serveOffers(builds []string) error {
	if w.cfg.NoEagerStart {
		return nil
	}
	for _, build := range builds {
		sub, err := w.nc.QueueSubscribe(api.EagerOfferSubject(w.cfg.Queue, build), api.EagerQueueGroup, w.onOffer)
		if err != nil {
			w.stopOffers()
			return err
		}
		w.offerSubs = append(w.offerSubs, sub)
	}
	return nil
}

// stopOffers unsubscribes from the offers and waits until no offer is being taken: a drive
// started from one is in inflight then.
func (w *Worker) stopOffers() {
	for _, sub := range w.offerSubs {
		_ = sub.Unsubscribe()
	}
	w.offerMu.Lock()
	defer w.offerMu.Unlock()
}

// onOffer takes an offered run when a run slot is free, and drives it.
func (w *Worker) onOffer(m *nats.Msg) {
	var task engine.Task
	if err := json.Unmarshal(m.Data, &task); err != nil || task.Seq != 1 || event.ValidateDerivedRunID(task.RunID) != nil {
		w.logger.Warn("declining a malformed offer of a new run", slog.String("subject", m.Subject))
		_ = m.Respond(nil)
		return
	}
	task.TraceParent = m.Header.Get(cloudevent.HeaderTraceParent) // the run's, as its task carries it
	w.offerMu.RLock()
	defer w.offerMu.RUnlock()
	if w.stopping.Load() {
		_ = m.Respond(nil)
		return
	}
	select {
	case w.slots <- struct{}{}:
	default:
		_ = m.Respond(nil)
		return
	}
	release := sync.OnceFunc(func() { <-w.slots })
	task.Offered = true
	if w.engine.Join(task) || w.engine.Ended(task.RunID) { // driven here already, from its task
		release()
		_ = m.Respond([]byte(jshost.OfferTaken))
		return
	}
	if err := w.cfg.Faults.Hit(fault.OfferTakenBeforeTask); err != nil {
		release()
		_ = m.Respond([]byte(jshost.OfferTaken))
		w.logger.Warn("injected fault: an offered run is taken and dropped", slog.String("run_id", task.RunID))
		return
	}
	// Subscribed before the task is sent: a worker the task reaches finds this drive.
	sub, err := w.nc.Subscribe(api.EagerDrivingSubject(task.RunID), func(q *nats.Msg) { _ = q.Respond(nil) })
	if err != nil {
		release()
		_ = m.Respond(nil)
		return
	}
	backed, err := w.host.ResumeAsync(w.runCtx, task)
	if err != nil {
		_ = sub.Unsubscribe()
		release()
		_ = m.Respond(nil)
		return
	}
	if err := m.Respond([]byte(jshost.OfferTaken)); err != nil {
		// The ingress may queue the task too, marked Offered, once the offer goes unanswered:
		// this drive goes on, as one of a task whose copies collapse into one.
		w.logger.Debug("the ingress did not get the answer to an offer", slog.String("run_id", task.RunID), slog.String("error", err.Error()))
	}
	task.Offered, task.FirstDelivery, task.Release, task.Backing = false, true, release, backed
	o := &offered{}
	w.offeredMu.Lock()
	w.offered[task.RunID] = o
	w.offeredMu.Unlock()
	w.offersTaken.Add(1)
	w.inflight.Add(1)
	go func() {
		defer func() {
			release()
			w.inflight.Done()
		}()
		ctx := w.runCtx
		if sc, ok := cloudevent.TraceFromHeaders(m.Header); ok {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
		ctx = tracing.WithRunID(ctx, task.RunID)
		_, err := w.engine.DriveTask(ctx, task)
		// No longer driven here before the task goes back: its next worker finds no one.
		_ = sub.Unsubscribe()
		w.offeredMu.Lock()
		delete(w.offered, task.RunID)
		w.offeredMu.Unlock()
		o.settle(err)
		if err != nil && ctx.Err() == nil {
			w.logger.DebugContext(ctx, "the drive of an offered run stopped; its task drives it", slog.String("run_id", task.RunID),
				slog.String("error", err.Error()))
		}
	}()
}

// offered is the drive of a run taken from an offer, and the run's task once it reached this
// worker. A drive settles once, after which adopt refuses.
type offered struct {
	mu      sync.Mutex
	msg     jetstream.Msg
	stop    func() // the task's heartbeats
	settled bool
}

// adopt keeps msg, the run's task, until the drive settles, and reports whether it did.
func (o *offered) adopt(w *Worker, msg jetstream.Msg) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.settled || o.msg != nil {
		return false
	}
	o.msg, o.stop = msg, w.heartbeat(msg)
	return true
}

// settle acknowledges the adopted task after a drive that ended with err nil, and hands it back
// to the queue at once otherwise.
func (o *offered) settle(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settled = true
	if o.msg == nil {
		return
	}
	o.stop()
	if err == nil {
		_ = o.msg.Ack()
	} else {
		_ = o.msg.Nak()
	}
}

// adopted hands msg, the task of run runID, to this worker's drive of the run taken from its
// offer, if there is one, and reports whether it did.
func (w *Worker) adopted(runID string, msg jetstream.Msg) bool {
	w.offeredMu.Lock()
	o := w.offered[runID]
	w.offeredMu.Unlock()
	return o != nil && o.adopt(w, msg)
}

// drivenElsewhere reports whether another worker drives offered run runID: one that took its
// offer answers while it does. A worker that does not answer in time counts as driving it.
func (w *Worker) drivenElsewhere(runID string) bool {
	_, err := w.nc.Request(api.EagerDrivingSubject(runID), nil, drivingAskTimeout)
	return err == nil || !errors.Is(err, nats.ErrNoResponders)
}

// offeredRecheck is how long the task of a run driven elsewhere waits before it is delivered
// again: as a failed drive's (backoff), at most AckWait.
func (w *Worker) offeredRecheck(msg jetstream.Msg) time.Duration {
	return min(backoff(msg), w.cfg.AckWait)
}

// OffersTaken returns how many offered runs this worker took and drove.
func (w *Worker) OffersTaken() int64 { return w.offersTaken.Load() }
