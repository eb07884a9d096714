package flow_test

import (
	"flag"
	"testing"

	"github.com/flowrun/flow/internal/apisurface"
)

var rewriteAPI = flag.Bool("rewrite", false, "rewrite api.txt, the description of the package's exported surface")

// api.txt describes the package's exported surface, one line per exported name with its
// signature: a change to the public API shows in review as a change to it. Run
// `go test ./pkg/flow -run TestAPI -rewrite` after changing the surface on purpose. Every exported
// name has a doc comment (apisurface.Undocumented says which do not).
func TestAPI(t *testing.T) { apisurface.Test(t, "pkg/flow", *rewriteAPI) }
