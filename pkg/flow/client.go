package flow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/natsconn"
)

// RunSummary is a run's entry in the runs index.
type RunSummary = core.Summary

// ClientOptions configure a Client. The zero value works.
type ClientOptions struct {
	// Queue is the task queue runs start on. Defaults to "default".
	Queue string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// CloseConn makes Close close the connection given to NewClient too. Defaults to false.
	CloseConn bool
}

// Client starts runs and reads, waits on, signals and cancels them, over NATS request/reply:
// it writes through the ingress service and reads through the history service (which `flow dev`,
// `flowd ingress` and `flowd history` run), and never touches a run's history itself. It is
// safe for concurrent use.
//
// The run operations are its methods; the other operations are grouped in sub-clients, small
// values that share the client's connection: [Client.Schedules], [Client.Batches],
// [Client.Pauses], [Client.Definitions] and [Client.Secrets]. A call's optional settings are a
// pointer to an options struct, its last argument, which may be nil; a call whose one setting
// is a count takes it as an argument whose zero means the default ([Client.HistoryPage],
// [ScheduleClient.Describe], [BatchClient.DryRun]).
type Client struct {
	nc      *nats.Conn
	ownConn bool
	queue   string
	// t sends every request of the client and of its sub-clients (transport.go).
	t *transport
	// seen remembers, per run, the last sequence this client was shown, so that its reads
	// include it (read-your-writes) even where a lagging replica answers.
	seen seenSeqs
	// routes remembers, per run, where its queries go (query_client.go).
	routes queryRoutes
}

// ClientInboxPrefix is the prefix of the reply inboxes of the client role: under Flow's NATS
// permissions (deploy/nats/auth.conf) the client's user may subscribe to ClientInboxPrefix+".>"
// only, so that it never reads the replies other roles get. Dial sets it; a program that connects
// by itself and passes its connection to NewClient sets it with
// nats.CustomInboxPrefix(flow.ClientInboxPrefix).
const ClientInboxPrefix = "_INBOX." + natsconn.RoleClient

// Dial connects to the NATS server at url ("" means nats://127.0.0.1:4222) and returns a client
// that owns the connection. It returns an error wrapping ErrUnreachable when no server answers;
// a call finding no ingress or history service there returns an error that says to start Flow
// (ErrIngressUnavailable, ErrHistoryUnavailable).
func Dial(ctx context.Context, url string, opts *ClientOptions) (*Client, error) {
	nc, err := natsconn.Dial(url, "flow-client", nats.CustomInboxPrefix(ClientInboxPrefix))
	if err != nil {
		return nil, err
	}
	c, err := NewClient(ctx, nc, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownConn = true
	return c, nil
}

// NewClient returns a client on an existing connection, which it closes only with
// opts.CloseConn. Under Flow's NATS permissions (deploy/nats/auth.conf) the connection must use
// the client role's inbox prefix, nats.CustomInboxPrefix(ClientInboxPrefix). opts may be nil. The first client on a connection puts a handler of
// permission violations in front of the connection's error handler (which it still calls), so
// that a call the server refuses for lack of permission fails at once with ErrPermissionDenied.
func NewClient(_ context.Context, nc *nats.Conn, opts *ClientOptions) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: NewClient needs a NATS connection; connect with Dial, or give it one", ErrInvalidInput)
	}
	if opts == nil {
		opts = &ClientOptions{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Client{nc: nc, queue: opts.Queue, ownConn: opts.CloseConn, t: &transport{nc: nc, logger: logger, perms: watchPermissions(nc)}}
	if c.queue == "" {
		c.queue = core.DefaultQueue
	}
	return c, nil
}

// Close closes the connection if the client dialled it.
func (c *Client) Close() {
	if c.ownConn {
		c.nc.Close()
	}
}

// StartOptions adjust [Client.Start]. The zero value works.
type StartOptions struct {
	// RunID is the run's ID: 1-128 letters, digits, '-' or '_'. Empty generates one.
	RunID string
	// Queue overrides the client's queue.
	Queue string
	// Attributes are the search attributes the run starts with, each declared by the
	// definition ([WithSearchAttributes]) and of its declared type. Empty for none.
	Attributes Attrs
	// OnConflict says what to do when RunID's latest run is active: ConflictFail (the
	// default: refused with ErrRunExists unless it repeats that run's start),
	// ConflictUseExisting or ConflictTerminateExisting. See docs/start-policies.md.
	OnConflict ConflictPolicy
	// Reuse says whether a new run may take RunID when its latest run ended: ReuseRefuse (the
	// default), ReuseAllow or ReuseAllowFailedOnly. The new run's ID is RunID=_n; the caller's
	// ID keeps addressing the latest run.
	Reuse ReusePolicy
	// Delay delays the run's first decision by this long; the run holds no worker meanwhile.
	Delay time.Duration
	// DedupKey, with DedupWindow, makes every start with the same key (per definition) within
	// the window of the first return the first's run, whatever RunID it asks for.
	DedupKey    string
	DedupWindow time.Duration
	// Debounce collapses the starts with its key within its quiet period into one run, started
	// once the period has passed since the latest of them, with the latest input.
	Debounce *Debounce
	// Priority orders the run's admission under flow control and its step attempts, higher
	// first; fixed for the run's life and inherited by its children. Defaults to 0.
	Priority int
	// ControlKey is the run's flow-control key, instead of the one the definition's key path
	// reads from the input. Defaults to "" (read it).
	ControlKey string
	// Control puts this run under flow control, instead of the definition's (WithFlowControl).
	// Defaults to nil (the definition's, if any).
	Control *FlowControl
	// ExecutionTimeout bounds the run and the runs it continues as; RunTimeout bounds this
	// run alone (docs/timeouts.md). A run that exceeds one fails with KindExecutionTimeout or
	// KindRunTimeout. Defaults to 0 (the definition's, WithRunTimeouts, if any; else none).
	ExecutionTimeout, RunTimeout time.Duration
}
