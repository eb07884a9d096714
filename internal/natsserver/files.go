package natsserver

import (
	"fmt"
	"log/slog"

	"github.com/flowrun/flow/internal/httpserve"
)

// The file handle budget of a process that embeds the server (`flow dev`). Every client
// connection, JetStream store file and HTTP connection takes one handle; when the process runs
// out, JetStream fails to open its files ("too many open files") and streams stop. So each
// consumer of handles is capped and the caps are summed against the process's limit, which
// Start raises to its hard limit:
//
//	nats-server client connections   Config.MaxConns        DefaultMaxConns (1024)
//	JetStream store files            JetStreamFiles         1024
//	HTTP connections of the services Config.ReservedFiles   2 x 1024 (ingress, history) + 2 x 64 (probes)
//	the rest of the process          otherFiles             256
//
// 4480 handles in all by default; Linux's usual hard limit is 524288 or more, macOS's 10240 or
// more. Start logs a warning saying what to lower when the limit is below the budget.
const (
	// DefaultMaxConns caps the client connections of the embedded server unless
	// Config.MaxConns says otherwise. In-process connections (Server.Connect) take no handle.
	DefaultMaxConns = 1024
	// JetStreamFiles is the handles the budget keeps for JetStream's store files.
	JetStreamFiles = 1024
	// DefaultReservedFiles is the handles the budget keeps for the HTTP servers of the process
	// (the ingress's and the history service's connection caps, and two probe listeners')
	// unless Config.ReservedFiles says otherwise.
	DefaultReservedFiles = 2*httpserve.DefaultMaxConns + 2*64
	otherFiles           = 256
)

// fileBudget is the handles the process may need: the server's, and reserved for the rest.
func fileBudget(maxConns, reserved int) uint64 {
	return uint64(maxConns + JetStreamFiles + reserved + otherFiles)
}

// checkFiles raises the soft limit of open files to the hard limit and warns when the budget
// does not fit in it.
func checkFiles(logger *slog.Logger, maxConns, reserved int) {
	limit, err := raiseFileLimit()
	if err != nil {
		logger.Warn("the open files limit could not be read or raised", slog.String("error", err.Error()))
		return
	}
	if need := fileBudget(maxConns, reserved); limit < need {
		logger.Warn(fmt.Sprintf("the process may open %d files, fewer than its budget of %d (nats-server connections %d, JetStream %d, HTTP %d, other %d): under load JetStream could fail with \"too many open files\"; raise the limit (ulimit -n) or lower the connection caps (FLOW_NATS_SERVER_MAX_CONNS, FLOW_INGRESS_HTTP_MAX_CONNS, FLOW_HISTORY_HTTP_MAX_CONNS)",
			limit, need, maxConns, JetStreamFiles, reserved, otherFiles), slog.String("component", "natsserver"))
	}
}
