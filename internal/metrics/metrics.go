// Package metrics holds Flow's OpenTelemetry instruments, created once from the global
// MeterProvider (otel.Meter("github.com/flowrun/flow")), which delegates to the provider a
// program sets later. Recording is cheap: the instruments and their attribute sets are made
// once, so a hot path records with no allocation beyond the SDK's own. Without a configured
// MeterProvider every instrument is a no-op.
//
// The list of metrics, with units and attributes, is in docs/tracing.md.
package metrics

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Name is the instrumentation scope of Flow's metrics.
const Name = "github.com/flowrun/flow"

// Names of the instruments.
const (
	DecisionsName     = "flow.decisions"
	AppendsName       = "flow.appends"
	ConflictsName     = "flow.append.conflicts"
	StepDurationName  = "flow.step.duration"
	TimerLatenessName = "flow.timer.lateness"
	TaskBacklogName   = "flow.tasks.pending"
	CacheLookupsName  = "flow.cache.lookups"
	BlockedRunsName   = "flow.runs.blocked"
)

// Attribute keys.
const (
	KeyKind     = attribute.Key("flow.decision.kind")
	KeyStep     = attribute.Key("flow.step.name")
	KeyOutcome  = attribute.Key("flow.step.outcome")
	KeyResult   = attribute.Key("flow.cache.result")
	KeyTimer    = attribute.Key("flow.timer.kind")
	KeyQueue    = attribute.Key("flow.queue")
	KeyConsumer = attribute.Key("flow.consumer")
)

// Step outcomes (KeyOutcome).
const (
	OutcomeOK     = "ok"
	OutcomeError  = "error"
	OutcomeCancel = "cancelled"
)

var (
	meter = otel.Meter(Name)

	decisions    = must(meter.Int64Counter(DecisionsName, metric.WithUnit("{decision}"), metric.WithDescription("Decisions committed by this process's workers, by kind (the type of the decision's first event).")))
	appends      = must(meter.Int64Counter(AppendsName, metric.WithUnit("{append}"), metric.WithDescription("Appends committed to run histories by this process.")))
	conflicts    = must(meter.Int64Counter(ConflictsName, metric.WithUnit("{conflict}"), metric.WithDescription("Appends refused because another writer appended first (optimistic concurrency).")))
	stepDuration = must(meter.Float64Histogram(StepDurationName, metric.WithUnit("s"), metric.WithDescription("Duration of step attempts run by this process, by step name and outcome."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)))
	timerLateness = must(meter.Float64Histogram(TimerLatenessName, metric.WithUnit("s"), metric.WithDescription("How late the scheduler fired timers: fire time minus due time."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)))
	cacheLookups = must(meter.Int64Counter(CacheLookupsName, metric.WithUnit("{lookup}"), metric.WithDescription("Snapshot cache lookups of drives, by result (hit or miss).")))

	// The cached options are slices, passed on as they are: a variadic call with a slice
	// allocates nothing.
	hit  = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(KeyResult.String("hit")))}
	miss = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(KeyResult.String("miss")))}

	// kinds caches the attribute options of each decision kind; the kinds are the event types.
	kinds sync.Map // string -> []metric.AddOption
	// steps caches the attribute options of each step name and outcome.
	steps sync.Map // stepKey -> []metric.RecordOption
	// timers caches the attribute options of each timer kind.
	timers sync.Map // string -> []metric.RecordOption
)

func must[T any](v T, err error) T {
	if err != nil {
		// The API returns a usable no-op instrument along with any error; it is only reported.
		otel.Handle(err)
	}
	return v
}

// Decision counts one committed decision of kind (the type of its first event).
func Decision(ctx context.Context, kind string) {
	opt, ok := kinds.Load(kind)
	if !ok {
		opt, _ = kinds.LoadOrStore(kind, []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(KeyKind.String(kind)))})
	}
	decisions.Add(ctx, 1, opt.([]metric.AddOption)...)
}

// Append counts one committed append.
func Append(ctx context.Context) { appends.Add(ctx, 1) }

// Conflict counts one append refused by a concurrent writer.
func Conflict(ctx context.Context) { conflicts.Add(ctx, 1) }

type stepKey struct{ name, outcome string }

// StepAttempt records the duration in seconds of one step attempt of step name with outcome
// (OutcomeOK, OutcomeError, OutcomeCancel).
func StepAttempt(ctx context.Context, name, outcome string, seconds float64) {
	k := stepKey{name, outcome}
	opt, ok := steps.Load(k)
	if !ok {
		opt, _ = steps.LoadOrStore(k, []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(KeyStep.String(name), KeyOutcome.String(outcome)))})
	}
	stepDuration.Record(ctx, seconds, opt.([]metric.RecordOption)...)
}

// TimerLateness records how late a timer of kind ("wait" or "retry") fired, in seconds (negative
// when it fired early).
func TimerLateness(ctx context.Context, kind string, seconds float64) {
	opt, ok := timers.Load(kind)
	if !ok {
		opt, _ = timers.LoadOrStore(kind, []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(KeyTimer.String(kind)))})
	}
	timerLateness.Record(ctx, seconds, opt.([]metric.RecordOption)...)
}

// CacheHit counts a drive that found its run's snapshot in the cache.
func CacheHit(ctx context.Context) { cacheLookups.Add(ctx, 1, hit...) }

// CacheMiss counts a drive that read its run's whole history.
func CacheMiss(ctx context.Context) { cacheLookups.Add(ctx, 1, miss...) }

// RepairsName counts the repairs of derived state by its owner's reconciler (docs/derived-state.md).
const RepairsName = "flow.repairs"

// KeyState names the derived state a repair fixed (flow_repairs_total{state=...}).
const KeyState = attribute.Key("state")

var (
	repairs = must(meter.Int64Counter(RepairsName, metric.WithUnit("{repair}"),
		metric.WithDescription("Repairs of derived state (a slot, a queue entry, an index entry, a timer, ...) that its owner's reconciler found out of line with history, by state.")))
	// repairOpts caches the attribute options of each state; repairCounts counts in process,
	// for tests and the interaction test's mutation check.
	repairOpts   sync.Map // string -> []metric.AddOption
	repairCounts sync.Map // string -> *atomic.Int64
)

// Repair counts n repairs of derived state state.
func Repair(ctx context.Context, state string, n int) {
	if n <= 0 {
		return
	}
	opt, ok := repairOpts.Load(state)
	if !ok {
		opt, _ = repairOpts.LoadOrStore(state, []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(KeyState.String(state)))})
	}
	repairs.Add(ctx, int64(n), opt.([]metric.AddOption)...)
	c, _ := repairCounts.LoadOrStore(state, new(atomic.Int64))
	c.(*atomic.Int64).Add(int64(n))
}

// Repairs returns the repairs of state counted in this process.
func Repairs(state string) int64 {
	c, ok := repairCounts.Load(state)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// The derived states whose repairs are counted (docs/derived-state.md lists their owners).
const (
	StateRunsIndex   = "runs_index"
	StateQueue       = "admission_queue"
	StateSlots       = "flow_slots"
	StateTimers      = "timers"
	StateHooks       = "hook_routes"
	StateParked      = "parked"
	StateStartKeys   = "start_keys"
	StateSchedules   = "schedule_runs"
	StateTombstones  = "tombstones"
	StatePayloads    = "payloads"
	StateCheckpoints = "checkpoints"
)
