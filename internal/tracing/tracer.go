package tracing

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of Flow's spans and metrics.
const Name = "github.com/flowrun/flow"

// Tracer returns Flow's tracer from the global TracerProvider. The global provider delegates to
// whatever provider the program sets later, so callers may keep the result.
func Tracer() trace.Tracer { return otel.Tracer(Name) }
