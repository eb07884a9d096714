package api

import "github.com/flowrun/flow/internal/core"

// Eager start: the ingress offers a new run's first task straight to a live worker of the run's
// queue (and build) over core NATS, right after it published the same task to FLOW_TASKS, and
// waits for no answer. A worker with a free run slot drives it at once; the queued copy, marked
// Offered, is the run's durable task, which a worker delivered it acknowledges once no one
// drives the run:
//
//	flow.eager.offer.<queue>             engine.Task (JSON)   queue group flow-worker
//	flow.eager.offer.<queue>.b.<build>   engine.Task (JSON)   queue group flow-worker
//	flow.eager.driving.<run>             empty -> empty       the drive of an offered run
//
// Only the ingress publishes offers: a worker trusts an offer's head (the run's run.started)
// as it trusts a task's. A worker that took an offer answers on flow.eager.driving.<run> while
// it drives the run; no responders there means no worker does.
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
