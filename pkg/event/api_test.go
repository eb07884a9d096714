package event_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/flowrun/flow/internal/apisurface"
)

var rewriteAPI = flag.Bool("rewrite", false, "rewrite api.txt, the description of the package's exported surface")

// api.txt describes the package's exported surface, one line per exported name with its
// signature: a change to the public API shows in review as a change to it. Run
// `go test ./pkg/event -run TestAPI -rewrite` after changing the surface on purpose. Every exported
// name has a doc comment (apisurface.Undocumented says which do not).
func TestAPI(t *testing.T) {
	undocumented, err := apisurface.Undocumented(".", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(undocumented) > 0 {
		t.Errorf("%d exported names of pkg/event lack a doc comment that starts with the name:\n  %s",
			len(undocumented), strings.Join(undocumented, "\n  "))
	}
	msg, err := apisurface.Check(".", "api.txt", *rewriteAPI)
	if err != nil {
		t.Fatal(err)
	}
	if msg != "" {
		t.Fatalf("the exported surface of pkg/event differs from api.txt (- api.txt only, + the package only):\n%s"+
			"run `go test ./pkg/event -run TestAPI -rewrite` if the change is deliberate, and review the diff", msg)
	}
}
