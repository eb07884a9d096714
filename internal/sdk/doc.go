// Package sdk is the seam between the SDK (pkg/flow) and the server side that runs workflow
// code (internal/engine, services/worker, pkg/flowtest). The SDK reads what the runtime puts in
// a step attempt's context from here (the heartbeat Beater), and the runtime reaches a
// registry's workflows, steps and options through Runtime, without pkg/flow exporting them.
//
// It imports only pure packages (internal/core, pkg/event): pkg/flow imports it, and it must
// never import pkg/flow or a server package.
package sdk
