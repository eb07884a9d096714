package natsperm_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/worker"
)

// A service other than the history service cannot create Flow's streams: started first, on a
// server where they do not exist, it fails to start (its request to create one goes unanswered
// until the start's deadline), and the server logs the refused creation.
func TestOnlyTheHistoryServiceProvisions(t *testing.T) {
	srv, v := runServer(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	w, err := worker.New(worker.Config{NATS: as(t, srv, natsperm.Worker), Logger: quietLogger()},
		flow.NewRegistry(&flow.RegistryOptions{Logger: quietLogger()}))
	require.NoError(t, err)
	err = w.Start(ctx)
	require.ErrorContains(t, err, "creating stream "+streams.History)
	require.Eventually(t, func() bool {
		for _, line := range v.Seen() {
			if strings.Contains(line, "flow-worker") && strings.Contains(line, "$JS.API.STREAM.CREATE.") {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
