package natsperm_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/natsperm"
)

var rewrite = flag.Bool("rewrite", false, "rewrite deploy/nats/auth.conf and the permissions table of docs/operations.md from internal/natsperm")

// repoFile is the path of a file of the repository, from this package's directory.
func repoFile(rel string) string { return filepath.Join("..", "..", filepath.FromSlash(rel)) }

// deploy/nats/auth.conf is what AuthConf generates. Run with -rewrite after changing a role.
func TestAuthConf(t *testing.T) {
	path := repoFile(natsperm.AuthConfPath)
	want := natsperm.AuthConf()
	if *rewrite {
		require.NoError(t, os.WriteFile(path, want, 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got),
		"%s is not what internal/natsperm generates: run `go test ./internal/natsperm -run TestAuthConf -rewrite` and review the diff", natsperm.AuthConfPath)
}
