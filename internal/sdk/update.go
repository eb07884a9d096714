package sdk

import (
	"sync/atomic"

	"github.com/flowrun/flow/internal/api"
)

// updateOutcomeOf is the hook pkg/flow sets in its init: it maps an update's state to a
// *flow.UpdateOutcome, or to the error the client returns for it.
var updateOutcomeOf atomic.Pointer[func(*api.UpdateState) (any, error)]

// SetUpdateOutcomeOf installs the function UpdateOutcomeOf calls. pkg/flow calls it in its
// init; nothing else should.
func SetUpdateOutcomeOf(f func(*api.UpdateState) (any, error)) { updateOutcomeOf.Store(&f) }

// UpdateOutcomeOf maps an update's state, as the history service reports it, to what
// flow.Client.UpdateResult returns: a *flow.UpdateOutcome, or an error (*flow.UpdateError when
// the update settled without a result). The test kit (pkg/flowtest) answers as the client does
// through it.
func UpdateOutcomeOf(st *api.UpdateState) (any, error) {
	f := updateOutcomeOf.Load()
	if f == nil {
		panic("sdk: UpdateOutcomeOf: pkg/flow is not linked into this program")
	}
	return (*f)(st)
}
