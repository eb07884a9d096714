package engine

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/tracing"
	"github.com/flowrun/flow/pkg/event"
)

// BenchmarkInstrumentation measures what tracing and metrics add to one decision and one step
// attempt of a traced run when the program configured no provider (the global no-ops).
func BenchmarkInstrumentation(b *testing.B) {
	s := core.New("order-1")
	s.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	s.Spec.Definition = "order"
	d := &driver{runID: s.RunID, s: s}
	ctx := d.traced(context.Background())
	events := []event.Payload{&event.StepScheduled{}}
	a := core.Attempt{RunID: s.RunID, StepID: "charge", Name: "chargePayment", Attempt: 1}
	b.Run("decision", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, span := d.decided(ctx, time.Now(), 2, events, nil, nil)
			span.End()
		}
	})
	b.Run("step", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			sctx, span := d.stepSpan(ctx, a) // ctx is the drive's traced context, as d.stepCtx
			stepDone(sctx, span, a, core.StepOutcome{}, time.Millisecond)
		}
	})
	b.Run("drive", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			d.traced(context.Background())
		}
	})
	_ = tracing.RunID(ctx)
}
