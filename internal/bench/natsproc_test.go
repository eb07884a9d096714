package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

func TestNATSConfig(t *testing.T) {
	for _, tc := range []struct {
		name, sync string
		wantLine   string // a line the configuration must hold ("" for none about sync)
		wantErr    string
	}{
		{name: "server default", sync: ""},
		{name: "always", sync: "always", wantLine: "  sync_interval: always"},
		{name: "interval", sync: "10s", wantLine: `  sync_interval: "10s"`},
		{name: "nonsense", sync: "sometimes", wantErr: "sync must be"},
		{name: "negative", sync: "-1s", wantErr: "sync must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			conf, err := natsConfig(4333, dir, tc.sync)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Contains(t, conf, "listen: 127.0.0.1:4333\n")
			require.Contains(t, conf, `store_dir: "`+dir+`"`)
			if tc.wantLine != "" {
				require.Contains(t, strings.Split(conf, "\n"), tc.wantLine)
			} else {
				require.NotContains(t, conf, "sync")
			}
			// nats-server itself reads it as meant.
			path := filepath.Join(dir, "nats.conf")
			require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
			opts, err := server.ProcessConfigFile(path)
			require.NoError(t, err)
			require.True(t, opts.JetStream)
			require.Equal(t, dir, opts.StoreDir)
			require.Equal(t, 4333, opts.Port)
			require.Equal(t, int32(8<<20), opts.MaxPayload)
			require.Equal(t, tc.sync == "always", opts.SyncAlways)
		})
	}
}

func TestNATSConfigRefusesQuotes(t *testing.T) {
	_, err := natsConfig(4222, `/tmp/a"b`, "")
	require.Error(t, err)
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 5}
	_, _ = b.Write([]byte("abc"))
	_, _ = b.Write([]byte("defg"))
	require.Equal(t, "cdefg", b.String())
}

// A cluster member's configuration names it, and routes it to every other member.
func TestNATSClusterConfig(t *testing.T) {
	dir := t.TempDir()
	ports, routes := []int{4301, 4302, 4303}, []int{6301, 6302, 6303}
	conf, err := natsClusterConfig(1, ports, routes, dir, "")
	require.NoError(t, err)
	path := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	require.Equal(t, "flowbench-2", opts.ServerName)
	require.Equal(t, 4302, opts.Port)
	require.Equal(t, "flowbench", opts.Cluster.Name)
	require.Equal(t, 6302, opts.Cluster.Port)
	var got []string
	for _, u := range opts.Routes {
		got = append(got, u.Host)
	}
	require.ElementsMatch(t, []string{"127.0.0.1:6301", "127.0.0.1:6303"}, got)
}
