package natsperm_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/internal/natstest"
)

var rewrite = flag.Bool("rewrite", false, "rewrite deploy/nats/auth.conf (and its Kubernetes copy) and the permissions table of docs/operations.md from internal/natsperm")

// repoFile is the path of a file of the repository, from this package's directory.
func repoFile(rel string) string { return filepath.Join("..", "..", filepath.FromSlash(rel)) }

// deploy/nats/auth.conf, and its copy for Kubernetes when there is one, are what AuthConf
// generates. Run with -rewrite after changing a role.
func TestAuthConf(t *testing.T) {
	want := natsperm.AuthConf()
	for _, rel := range []string{natsperm.AuthConfPath, natsperm.KubernetesAuthConfPath} {
		path := repoFile(rel)
		if rel == natsperm.KubernetesAuthConfPath {
			if _, err := os.Stat(filepath.Dir(path)); err != nil {
				continue // no Kubernetes manifests in this tree
			}
		}
		if *rewrite {
			require.NoError(t, os.WriteFile(path, want, 0o644))
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got),
			"%s is not what internal/natsperm generates: run `go test ./internal/natsperm -rewrite` and review the diff", rel)
	}
}

// nats-server loads auth.conf into exactly the roles' users and permissions, with the passwords
// read from the environment.
func TestAuthConfLoadsTheRoles(t *testing.T) {
	setPasswords(t)
	opts := loadAuthConf(t)
	roles := natsperm.Roles()
	require.Len(t, opts.Users, len(roles))
	for i, r := range roles {
		u := opts.Users[i]
		require.Equal(t, r.User, u.Username)
		require.Equal(t, password(r), u.Password, "the password of %s is $%s", r.User, r.PasswordEnv)
		require.Equal(t, r.Permissions(), u.Permissions, "the permissions of %s", r.User)
		require.Nil(t, u.Account, "%s is in the global account, whose JetStream the server enables", r.User)
	}
	require.Empty(t, opts.Accounts, "auth.conf defines no account")
}

// A password variable that is unset stops the server from loading its configuration, naming the
// variable; one that holds a bcrypt hash (`nats server passwd`) authenticates the plain password.
func TestPasswordsFromTheEnvironment(t *testing.T) {
	setPasswords(t)
	client, err := natsperm.Get(natsperm.Client)
	require.NoError(t, err)
	require.NoError(t, os.Unsetenv(client.PasswordEnv))
	_, err = loadAuthConfErr(t)
	require.ErrorContains(t, err, client.PasswordEnv)

	// Values are read as configuration values: a number is not a password.
	t.Setenv(client.PasswordEnv, "123456")
	_, err = loadAuthConfErr(t)
	require.Error(t, err)

	hash, err := bcrypt.GenerateFromPassword([]byte("plain-secret"), bcrypt.MinCost)
	require.NoError(t, err)
	t.Setenv(client.PasswordEnv, string(hash))
	opts := loadAuthConf(t)
	opts.JetStream = true
	srv := natstest.RunServer(t, opts)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(client.User, "plain-secret"))
	require.NoError(t, err)
	nc.Close()
	_, err = nats.Connect(srv.ClientURL(), nats.UserInfo(client.User, string(hash)))
	require.Error(t, err, "the hash itself is not the password")
}

// loadAuthConf loads the repository's auth.conf as nats-server does.
func loadAuthConf(t *testing.T) *server.Options {
	t.Helper()
	opts, err := loadAuthConfErr(t)
	require.NoError(t, err)
	return opts
}

func loadAuthConfErr(t *testing.T) (*server.Options, error) {
	t.Helper()
	auth, err := os.ReadFile(repoFile(natsperm.AuthConfPath))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "auth.conf")
	require.NoError(t, os.WriteFile(path, auth, 0o600))
	return server.ProcessConfigFile(path)
}
