package engine

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/metrics"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
)

// Attributes of the engine's spans (see docs/tracing.md).
const (
	AttrRunID        = attribute.Key("flow.run_id")
	AttrSeq          = attribute.Key("flow.seq")
	AttrDecisionKind = attribute.Key("flow.decision.kind")
	AttrEvents       = attribute.Key("flow.decision.events")
	AttrDefinition   = attribute.Key("flow.definition")
	AttrStepID       = attribute.Key("flow.step.id")
	AttrStepName     = attribute.Key("flow.step.name")
	AttrAttempt      = attribute.Key("flow.step.attempt")
)

// Span names: the decision span is "flow.decide <definition>", the step attempt span
// "flow.step <step name>".
const (
	SpanDecide = "flow.decide "
	SpanStep   = "flow.step "
)

var tracer = tracing.Tracer()

// spanNames caches span names by prefix and name (definitions and step names are few).
var spanNames sync.Map // [2]string -> string

func spanName(prefix, name string) string {
	k := [2]string{prefix, name}
	if n, ok := spanNames.Load(k); ok {
		return n.(string)
	}
	n, _ := spanNames.LoadOrStore(k, prefix+name)
	return n.(string)
}

// traced returns ctx for the work of a drive of run s: it carries the run ID and, as its remote
// parent, the run's trace context, the one run.started recorded or, for a run started without
// one, the one ctx already carries (the resume task's). It sets d.definition and d.decideName,
// which the step attempts read.
func (d *driver) traced(ctx context.Context) context.Context {
	d.definition = d.s.Spec.Definition
	d.decideName = spanName(SpanDecide, d.definition)
	ctx = tracing.WithRemote(ctx, d.s.TraceParent)
	if tracing.RunID(ctx) == d.runID {
		return ctx
	}
	return tracing.WithRunID(ctx, d.runID)
}

// inTrace returns ctx for starting a run that s starts (a child, a continuation): ctx itself
// when it carries a span (the decision that scheduled the child), else ctx with s's trace
// context as its remote parent, so that the new run records a context of s's trace.
func inTrace(ctx context.Context, s *core.Snapshot) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return tracing.WithRemote(ctx, s.TraceParent)
}

// decided emits the span of a decision committed now at sequences first.. of the run, begun at
// began, linked to the ingress requests of the inputs it answers (traces), and counts it. The
// span is open in the returned context, for what the commit starts (child runs); end it once
// that is done. Only work done now is traced: a replay never reaches here.
func (d *driver) decided(ctx context.Context, began time.Time, first uint64, events []event.Payload, traces []string, failure *event.DecisionFailed) (context.Context, trace.Span) {
	kind := string(events[0].EventType())
	metrics.Decision(ctx, kind)
	var opts [3]trace.SpanStartOption
	n := 0
	opts[n], n = trace.WithTimestamp(began), n+1
	if len(traces) > 0 {
		links := make([]trace.Link, 0, len(traces))
		for _, tp := range traces {
			if l, ok := tracing.Link(tp); ok {
				links = append(links, l)
			}
		}
		opts[n], n = trace.WithLinks(links...), n+1
	}
	ctx, span := tracer.Start(ctx, d.decideName, opts[:n]...)
	if span.IsRecording() {
		span.SetAttributes(AttrRunID.String(d.runID), AttrSeq.Int64(int64(first)), AttrDecisionKind.String(kind),
			AttrEvents.Int(len(events)), AttrDefinition.String(d.definition))
		if failure != nil {
			span.SetStatus(codes.Error, failure.Kind+": "+failure.Detail)
		}
	}
	return ctx, span
}

// stepSpan starts the span of attempt a, run now, in ctx, a context derived from the drive's
// traced one: a child of the run's trace context.
func (d *driver) stepSpan(ctx context.Context, a core.Attempt) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, spanName(SpanStep, a.Name))
	if span.IsRecording() {
		span.SetAttributes(AttrRunID.String(d.runID), AttrStepID.String(a.StepID), AttrStepName.String(a.Name),
			AttrAttempt.Int(a.Attempt), AttrDefinition.String(d.definition))
	}
	return ctx, span
}

// stepDone ends the span of attempt a with its outcome and records its duration.
func stepDone(ctx context.Context, span trace.Span, a core.Attempt, out core.StepOutcome, took time.Duration) {
	outcome := metrics.OutcomeOK
	switch {
	case out.Err != nil && ctx.Err() != nil:
		outcome = metrics.OutcomeCancel
	case out.Err != nil:
		outcome = metrics.OutcomeError
	}
	metrics.StepAttempt(ctx, a.Name, outcome, took.Seconds())
	if out.Err != nil && span.IsRecording() {
		span.RecordError(out.Err)
		span.SetStatus(codes.Error, out.Err.Error())
	}
	span.End()
}
