package api

import "github.com/flowrun/flow/internal/core"

// Eager start (services/ingress.Config.EagerStart): the ingress offers a new run's first task
// to a live worker of the run's queue (and build) over core NATS, and queues the task only if no
// worker takes it. A worker that takes it answers jshost.OfferTaken, answers on the run's
// driving subject while it drives the run, and queues the run's task itself, marked Offered:
//
//	flow.eager.offer.<queue>             engine.Task (JSON) -> "taken", or empty   queue group flow-worker
//	flow.eager.offer.<queue>.b.<build>   engine.Task (JSON) -> "taken", or empty   queue group flow-worker
//	flow.eager.driving.<run>             empty -> empty, while the taker drives the run
//
// Only the ingress publishes offers: a worker trusts an offer's head (the run's run.started)
// as it trusts a task's. No responders on a run's driving subject means no worker drives it
// from an offer.
const (
	EagerPrefix        = "flow.eager."
	eagerOfferPrefix   = EagerPrefix + "offer."
	eagerDrivePrefix   = EagerPrefix + "driving."
	EagerQueueGroup    = "flow-worker"
	EagerOffersFilter  = eagerOfferPrefix + ">"
	EagerDrivingFilter = eagerDrivePrefix + "*"
)

// EagerOfferSubject is where new runs of queue are offered: those pinned to build (non-empty)
// reach only that build's workers, as their tasks do (streams.TaskSubject).
func EagerOfferSubject(queue, build string) string {
	if queue == "" {
		queue = core.DefaultQueue
	}
	if build == "" {
		return eagerOfferPrefix + queue
	}
	return eagerOfferPrefix + queue + ".b." + core.BuildToken(build)
}

// EagerDrivingSubject is where the worker that took run runID's offer answers while it drives it.
func EagerDrivingSubject(runID string) string { return eagerDrivePrefix + runID }
