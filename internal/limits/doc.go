// Package limits holds Flow's flow-control state in JetStream, shared by every process: the
// concurrency slots and rate windows of each flow-control group (admission of runs), and those of
// each limited step name (step attempts). Its entries live in the FLOW_LIMITS bucket and are
// changed only by compare-and-set, so that two writers (an admission controller and the history
// service releasing a slot, or two workers taking step slots) never lose each other's change.
//
// # Rate limits
//
// A rate limit of N per period P is a durable sliding-window log: the state keeps the time of
// every admission of the last P, and a new admission at time t is allowed only while fewer than N
// of them lie in [t-P, t]. Equivalently, it is a token bucket of N tokens in which each token
// comes back exactly P after it was used, not a bucket refilled at N/P: a classic refill bucket
// lets 2N starts through around a refill boundary, this log never lets more than N into any
// window of length P, closed or open. The times are those the admitted runs' run.admitted events
// are recorded at (the controller stamps the event with the time it took the token at), and a
// group's log times never go backwards, so the guarantee can be checked on history alone.
//
// # Concurrency limits
//
// A concurrency limit of N is a set of holders: the runs admitted (or being admitted) that have
// not been released. A slot is taken before run.admitted is appended, and released only after
// the run's terminal event is committed (by the history service, which follows every commit), so
// that at no instant do more than N runs of a scope hold one, on any clock that stamps history.
package limits
