// Package kubernetes holds Flow's Kubernetes manifests: a kustomize base (base/) and a dev
// overlay (overlays/dev/), described in docs/kubernetes.md. The package has no code; its tests
// render the overlay with kustomize as a library and decode every object strictly against the
// Kubernetes API types, so that a misspelled field, an unknown kind, a probe on the wrong port or
// a Secret that does not exist fails `go test`; then check the hardening (network policies, the
// NATS routes' password and mutual TLS, bcrypt hashes for the NATS pods, lame duck, probes,
// scrape annotations, disruption budgets, zone spread, the public URL), running nats-server on
// the configuration each NATS pod gets. The command gensecrets (`make k8s-secrets`) writes an
// overlay's secret files.
package kubernetes
