package sdk

import (
	"sync/atomic"

	"github.com/flowrun/flow/internal/core"
)

// viewOf is the function SnapshotView calls: pkg/flow installs it (it maps a core projection
// to a *flow.Snapshot, which this package cannot name).
var viewOf atomic.Pointer[func(*core.Snapshot) any]

// SetSnapshotView installs the function SnapshotView calls. pkg/flow calls it in its init;
// nothing else should.
func SetSnapshotView(f func(*core.Snapshot) any) { viewOf.Store(&f) }

// SnapshotView returns the *flow.Snapshot view of s, as flow.Context.Snapshot shows it: the
// test kit (pkg/flowtest) returns its projections to users through it. The view shares s's
// payload bytes; s must not change while the view is read.
func SnapshotView(s *core.Snapshot) any {
	f := viewOf.Load()
	if f == nil {
		panic("sdk: SnapshotView: pkg/flow is not linked into this program")
	}
	return (*f)(s)
}
