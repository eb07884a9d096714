package history

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
)

// listPrefix answers a listing as list does, keeping only the runs whose ID starts with
// prefix ("" keeps all), as the web UI's runs list asks.
func (m *readModel) listPrefix(req api.ListRequest, prefix string) (api.ListResponse, error) {
	return m.listWhere(req, func(sum core.Summary) bool { return strings.HasPrefix(sum.RunID, prefix) })
}

func TestListPrefixPages(t *testing.T) {
	t.Parallel()
	m := newReadModel(nil, slog.New(slog.DiscardHandler))
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i, id := range []string{"ord-1", "ord-2", "ord-3", "other-1", "ord-4"} {
		m.runs[id] = core.Summary{RunID: id, Definition: "order", Status: core.StatusCompleted, UpdatedAt: t0.Add(time.Duration(i) * time.Second)}
	}
	var got []string
	req := api.ListRequest{Limit: 2}
	for range 5 {
		resp, err := m.listPrefix(req, "ord-")
		require.NoError(t, err)
		require.Equal(t, 4, resp.Total)
		for _, sum := range resp.Runs {
			got = append(got, sum.RunID)
		}
		if resp.Next == "" {
			break
		}
		req.Cursor = resp.Next
	}
	require.Equal(t, []string{"ord-4", "ord-3", "ord-2", "ord-1"}, got, "newest first, page by page")
	_, err := m.listPrefix(api.ListRequest{Status: []string{"asleep"}}, "ord-")
	require.ErrorContains(t, err, `unknown status "asleep"`)
	all, err := m.listPrefix(api.ListRequest{}, "")
	require.NoError(t, err)
	require.Equal(t, 5, all.Total)
}
