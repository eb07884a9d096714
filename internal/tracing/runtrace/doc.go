// Package runtrace holds the cross-service tracing test: one run, started through the ingress
// and driven by a history service, a scheduler and workers on an embedded JetStream, is one
// connected trace, and a worker restart emits no duplicate span. It is a package of its own
// because the test sets OpenTelemetry's global providers.
package runtrace
