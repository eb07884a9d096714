package core_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
)

// TestCanonicalJSONOfLargeDocuments: a large document that is compact already is checked and
// returned as it is (no copy of a 100 MiB payload); one with whitespace outside its strings is
// compacted, whitespace inside strings kept; invalid JSON is an error either way.
func TestCanonicalJSONOfLargeDocuments(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("a b\\\" c", 2000)
	compact := []byte(`{"k":"` + big + `","n":[1,2]}`)
	got, err := core.CanonicalJSON(compact)
	require.NoError(t, err)
	require.Equal(t, compact, []byte(got))
	require.True(t, &got[0] == &compact[0], "a compact document is not copied")

	spaced := []byte(`{ "k" : "` + big + `", "n": [1, 2] }`)
	got, err = core.CanonicalJSON(spaced)
	require.NoError(t, err)
	require.Equal(t, compact, []byte(got))

	_, err = core.CanonicalJSON(bytes.TrimSuffix(compact, []byte("}")))
	require.Error(t, err)
	_, err = core.CanonicalJSON([]byte(`{"k":"` + big + `" "n":1}`))
	require.Error(t, err)
}
