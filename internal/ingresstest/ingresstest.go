// Package ingresstest starts the ingress service for tests of other packages.
package ingresstest

import (
	"testing"

	"github.com/flowrun/flow/services/ingress"
)

// Start starts an ingress service with cfg (HTTP off unless cfg says otherwise) and stops it
// when the test ends.
func Start(t testing.TB, cfg ingress.Config) *ingress.Service {
	t.Helper()
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "off"
	}
	in, err := ingress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Stop() })
	return in
}
