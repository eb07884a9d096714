package natsperm_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsperm"
)

// docs/operations.md lists the roles' permissions as internal/natsperm defines them. Run with
// -rewrite after changing a role.
func TestOperationsDocListsThePermissions(t *testing.T) {
	path := repoFile(natsperm.OperationsDocPath)
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	before, rest, ok := strings.Cut(string(doc), natsperm.DocBegin)
	require.True(t, ok, "%s has no line %s", natsperm.OperationsDocPath, natsperm.DocBegin)
	_, after, ok := strings.Cut(rest, natsperm.DocEnd+"\n")
	require.True(t, ok, "%s has no line %s after %s", natsperm.OperationsDocPath, natsperm.DocEnd, natsperm.DocBegin)
	want := before + string(natsperm.Markdown()) + after
	if *rewrite {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		doc = []byte(want)
	}
	require.Equal(t, want, string(doc),
		"the permissions table of %s is not what internal/natsperm says: run `go test ./internal/natsperm -rewrite` and review the diff", natsperm.OperationsDocPath)
}
