// Package crashtest kills Flow's services with SIGKILL, as real OS processes, and checks that no
// run is lost, no effect is applied twice and no history breaks an invariant (core.Check).
//
// The package holds only tests. The test binary plays every part:
//
//   - The parent is the ordinary `go test` process. It runs the NATS server embedded
//     (natstest.RunJetStream), starts runs and reads histories through a flow.Client, and owns
//     the child processes.
//   - A child is the same test binary re-executed (os.Args[0], by package proctest) with
//     FLOW_CRASHTEST_ROLE set to "worker" or "scheduler". TestMain sees the variable and, instead of running tests, starts a
//     worker.Worker or scheduler.Scheduler configured through its Config struct from the
//     environment (FLOW_NATS_URL, FLOW_CRASHTEST_ACK_WAIT, FLOW_CRASHTEST_LEASE_TTL, ...). It
//     reports readiness on an extra pipe (file descriptor 3) and runs until its stdin closes,
//     which happens when the parent closes it or dies, so no child outlives the test binary.
//
// The parent kills children with SIGKILL (os.Process.Kill), never gracefully, and kills every
// child still alive on test cleanup. Each child writes its stdout and stderr to a log file that
// the test prints when it fails (or always with FLOW_TEST_LOG set).
//
// Children share a scratch directory with the parent (FLOW_CRASHTEST_DIR), where step functions
// record their invocations and the external effects they apply, so that the parent can count
// them after the crash.
//
// The scenarios (crashtest_test.go):
//
//   - TestWorkerKilledMidStep: a worker dies after a step's external effect and before the step's
//     result is committed; another worker reruns the step, whose idempotency key keeps the
//     effect single.
//   - TestSchedulerKilledWithPendingTimers: the leading scheduler dies with timers pending; a new
//     scheduler takes the lease once it expires and fires every overdue timer exactly once.
//   - TestTwoWorkersDriveSameRuns: two worker processes are handed the same runs at once through
//     extra resume tasks; the store's optimistic concurrency keeps every history valid.
package crashtest
