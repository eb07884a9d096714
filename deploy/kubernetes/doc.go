// Package kubernetes holds Flow's Kubernetes manifests: a kustomize base (base/) and a dev
// overlay (overlays/dev/), described in docs/kubernetes.md. The package has no code; its tests
// render the overlay with kustomize as a library and decode every object strictly against the
// Kubernetes API types, so that a misspelled field, an unknown kind, a probe on the wrong port or
// a Secret that does not exist fails `go test`.
package kubernetes
