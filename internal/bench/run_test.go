package bench

import (
	"context"
	"image/png"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestRunEmbedded runs a few quick workloads end to end against an embedded server, and renders
// their table and chart: what `flowbench -quick -embedded -workloads W1,W5,ceiling-1` does.
func TestRunEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workloads end to end")
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	results, err := Run(t.Context(), Options{Quick: true, Syncs: []string{"default"}, Embedded: true,
		Workloads: []string{"W1", "W5", "ceiling-1"}, Logger: discard, ServiceLogger: discard})
	require.NoError(t, err)
	require.Len(t, results, 3)
	for _, r := range results {
		require.Empty(t, r.Error, r.Workload)
		require.Equal(t, "flow", r.System)
		require.Equal(t, "sync=default,nats=embedded", r.Variant)
		require.Len(t, r.Reps, 3, r.Workload)
		require.Contains(t, r.Processes, "flow", "an embedded server has no process of its own")
		require.NotContains(t, r.Processes, "nats")
	}
	w1 := results[0].Metrics
	require.Positive(t, w1["p50_ms"])
	require.GreaterOrEqual(t, w1["p99_ms"], w1["p50_ms"])
	require.Positive(t, w1["msgs_per_step"])
	require.Contains(t, results[1].Metrics, "total_s")
	require.Positive(t, results[2].Metrics["appends_per_s"])

	var table strings.Builder
	require.NoError(t, WriteTable(&table, results))
	require.Contains(t, table.String(), "flow sync=default,nats=embedded")
	chart := filepath.Join(t.TempDir(), "chart.png")
	require.NoError(t, WriteChart(chart, results))
	f, err := os.Open(chart)
	require.NoError(t, err)
	defer f.Close()
	_, err = png.Decode(f)
	require.NoError(t, err)
}

// TestNATSProcess builds nats-server at go.mod's version, starts it with sync always, and
// stops it.
func TestNATSProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server")
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	require.NoError(t, BuildNATS(t.Context(), bin))
	p, err := startNATSProcess(t.Context(), bin, "always")
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = p.Stop()
		}
	})
	require.Positive(t, p.PIDs()[0])
	nc, err := p.Connect("test")
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	_, err = js.Publish(t.Context(), "t.1", []byte("x"))
	require.NoError(t, err)
	_, err = readMem(p.PIDs()[0])
	require.NoError(t, err)

	require.NoError(t, p.Stop())
	stopped = true
	_, err = os.Stat(p.dir)
	require.True(t, os.IsNotExist(err), "Stop removes the store")
}
