package flow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/jshost"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// ErrUnreachable is wrapped by Dial when NATS does not answer.
var ErrUnreachable = natsconn.ErrUnreachable

// ErrRunExists is wrapped by Start when the run ID is taken by a run with another definition,
// spec or input.
var ErrRunExists = engine.ErrRunExists

// RunSummary is a run's entry in the runs index.
type RunSummary = core.Summary

// ClientOptions configure a Client. The zero value works.
type ClientOptions struct {
	// Queue is the task queue runs start on. Defaults to "default".
	Queue string
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// Client starts runs and reads, waits on, signals and cancels them, over NATS JetStream. It is
// safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	ownConn bool
	queue   string
	store   *jsstore.Store
	engine  *engine.Engine
	defs    jetstream.KeyValue
	runs    jetstream.KeyValue
}

// Dial connects to the NATS server at url ("" means nats://127.0.0.1:4222) and returns a client
// that owns the connection. It returns an error wrapping ErrUnreachable when no server answers,
// and one that says to start Flow when Flow's streams do not exist there.
func Dial(ctx context.Context, url string, opts *ClientOptions) (*Client, error) {
	nc, err := natsconn.Dial(url, "flow-client")
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

// NewClient returns a client on an existing connection, which it does not close. opts may be nil.
func NewClient(ctx context.Context, nc *nats.Conn, opts *ClientOptions) (*Client, error) {
	if opts == nil {
		opts = &ClientOptions{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := jsstore.New(ctx, js, &jsstore.Options{Source: "flow/client"})
	if err != nil {
		return nil, err
	}
	host, err := jshost.New(ctx, js, "flow/client", logger)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Config{Store: st, Host: host, Logger: logger, CacheSize: -1})
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, js: js, queue: opts.Queue, store: st, engine: eng}
	if c.queue == "" {
		c.queue = streams.DefaultQueue
	}
	if c.defs, err = js.KeyValue(ctx, streams.DefinitionsBucket); err != nil {
		return nil, err
	}
	if c.runs, err = js.KeyValue(ctx, streams.RunsBucket); err != nil {
		return nil, err
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
}

// Start starts a run of definition with input (encoded to JSON; a json.RawMessage is used as
// is) and returns its ID. The definition must be published by a worker of the queue, whose
// build ID and patch markers the run records. Starting an existing run ID again with the same
// definition and input returns it; with different ones it returns an error wrapping
// ErrRunExists. opts may be nil.
func (c *Client) Start(ctx context.Context, definition string, input any, opts *StartOptions) (string, error) {
	if opts == nil {
		opts = &StartOptions{}
	}
	queue := opts.Queue
	if queue == "" {
		queue = c.queue
	}
	in, err := encode(input)
	if err != nil {
		return "", fmt.Errorf("%w: encoding the input: %w", ErrInvalidInput, err)
	}
	if err := event.ValidateName("definition", definition); err != nil {
		return "", err
	}
	def, err := c.definition(ctx, queue, definition)
	if err != nil {
		return "", err
	}
	spec := event.Spec{Definition: definition, BuildID: def.BuildID, Patches: def.Patches}
	runID, _, err := c.engine.Start(ctx, engine.StartParams{RunID: opts.RunID, Spec: spec, Input: in, Queue: queue})
	return runID, err
}

func (c *Client) definition(ctx context.Context, queue, name string) (streams.Definition, error) {
	var d streams.Definition
	e, err := c.defs.Get(ctx, streams.DefinitionKey(queue, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		known, _ := c.Definitions(ctx, queue)
		hint := "no worker has published a definition on this queue; is a worker (or `flow dev`) running?"
		if len(known) > 0 {
			hint = "known: " + strings.Join(known, ", ")
		}
		return d, fmt.Errorf("%w: workflow definition %q is not registered on queue %q (%s)", ErrNotFound, name, queue, hint)
	}
	if err != nil {
		return d, fmt.Errorf("reading definition %q: %w", name, err)
	}
	return d, json.Unmarshal(e.Value(), &d)
}

// Definitions returns the definitions workers published on queue ("" means the client's), sorted.
func (c *Client) Definitions(ctx context.Context, queue string) ([]string, error) {
	if queue == "" {
		queue = c.queue
	}
	lister, err := c.defs.ListKeysFiltered(ctx, queue+".>")
	if err != nil {
		return nil, err
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, strings.TrimPrefix(k, queue+"."))
	}
	slices.Sort(names)
	return names, nil
}

// Snapshot returns the projection of run runID's history. An unknown run is an error wrapping
// ErrNotFound.
func (c *Client) Snapshot(ctx context.Context, runID string) (*Snapshot, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	s, err := c.engine.Snapshot(ctx, runID)
	if errors.Is(err, core.ErrNotFound) {
		return nil, fmt.Errorf("%w: run %q does not exist (list runs with `flow runs`)", ErrNotFound, runID)
	}
	return s, err
}

// History returns run runID's events after seq after (0 for all), in order.
func (c *Client) History(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	hist, err := c.store.Load(ctx, runID, after)
	if err == nil && len(hist) == 0 && after == 0 {
		err = fmt.Errorf("%w: run %q does not exist (list runs with `flow runs`)", ErrNotFound, runID)
	}
	return hist, err
}

// Watch calls fn with each event of run runID after seq after, as they are committed, until the
// run ends (after its terminal event), fn returns an error, or ctx ends.
func (c *Client) Watch(ctx context.Context, runID string, after uint64, fn func(event.Envelope) error) error {
	return c.follow(ctx, runID, after, func(hist []event.Envelope) (bool, error) {
		for _, e := range hist {
			if err := fn(e); err != nil {
				return true, err
			}
			if e.Type().Terminal() {
				return true, nil
			}
		}
		return false, nil
	})
}

// follow calls fn with the events of run runID after seq after, then with each batch of new
// ones as they are committed, until fn reports done or ctx ends.
//
// New commits arrive as core NATS deliveries on the run's subject: each carries the commit, and
// is taken as is when it follows the last event seen. A delivery can precede the stream storing
// it, so after a gap follow reads the stream until it has every notified event. A commit
// published just before the subscription took effect is delivered to no one, so follow also
// re-reads the stream every second while it waits.
func (c *Client) follow(ctx context.Context, runID string, after uint64, fn func([]event.Envelope) (bool, error)) error {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return err
	}
	var mu sync.Mutex
	var pending []*nats.Msg
	wake := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(streams.HistorySubject(runID), func(m *nats.Msg) {
		mu.Lock()
		pending = append(pending, m)
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()

	deliver := func(hist []event.Envelope) (bool, error) {
		if len(hist) == 0 {
			return false, nil
		}
		after = hist[len(hist)-1].Seq
		return fn(hist)
	}
	hist, err := c.store.Load(ctx, runID, after)
	if err != nil {
		return err
	}
	if after == 0 && len(hist) == 0 {
		return fmt.Errorf("%w: run %q does not exist (list runs with `flow runs`)", ErrNotFound, runID)
	}
	if done, err := fn(hist); done || err != nil {
		return err
	}
	if len(hist) > 0 {
		after = hist[len(hist)-1].Seq
	}
	var notified uint64
	poll := time.NewTimer(time.Second)
	defer poll.Stop()
	catchUp := time.Millisecond
	for {
		read := false
		select {
		case <-wake:
		case <-poll.C:
			read = true
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		msgs := pending
		pending = nil
		mu.Unlock()
		slices.SortFunc(msgs, func(a, b *nats.Msg) int { return cmp.Compare(firstSeq(a), firstSeq(b)) })
		for _, m := range msgs {
			last, ok := jsstore.LastSeq(m.Header)
			if !ok || last <= after {
				continue
			}
			notified = max(notified, last)
			var envs []event.Envelope
			if read || firstSeq(m) != after+1 || json.Unmarshal(m.Data, &envs) != nil {
				read = true // a gap, or unreadable: take it from the stream
				continue
			}
			if done, err := deliver(envs); done || err != nil {
				return err
			}
		}
		if read || after < notified {
			hist, err := c.store.Load(ctx, runID, after)
			if err != nil {
				return err
			}
			if done, err := deliver(hist); done || err != nil {
				return err
			}
		}
		wait := time.Second
		if after < notified {
			// Notified of a commit the stream has not stored yet: read again shortly.
			wait, catchUp = catchUp, min(2*catchUp, 100*time.Millisecond)
		} else {
			catchUp = time.Millisecond
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(wait)
	}
}

// firstSeq returns the first run sequence of a history message, or 0.
func firstSeq(m *nats.Msg) uint64 {
	n, _ := strconv.ParseUint(m.Header.Get(jsstore.HeaderFirstSeq), 10, 64)
	return n
}

// Result waits until run runID ends, following continuations, and decodes its output into out
// (which may be nil). A run that did not complete returns a *RunError; so does a blocked run, at
// once, with its diagnosis.
func (c *Client) Result(ctx context.Context, runID string, out any) error {
	for {
		s := core.New(runID)
		err := c.follow(ctx, runID, 0, func(hist []event.Envelope) (bool, error) {
			if err := s.ApplyAll(hist); err != nil {
				return true, err
			}
			return s.Terminal() || s.Status == StatusBlocked, nil
		})
		if err != nil {
			return err
		}
		if s.Status == StatusContinuedAsNew {
			runID = s.Outcome.SuccessorRunID
			continue
		}
		return DecodeResult(s, out)
	}
}

// Cancel requests cancellation of run runID and returns the ID of the run that received the
// request: runID, or, if runID continued as new, the latest run it continued as. Requesting it
// again is accepted.
func (c *Client) Cancel(ctx context.Context, runID, reason string) (string, error) {
	to, err := c.engine.Cancel(ctx, runID, reason)
	return to, c.notFound(runID, err)
}

// Terminate ends run runID (or the latest run it continued as) as failed at once, whatever its
// code would decide, and returns the ID of the run it ended.
func (c *Client) Terminate(ctx context.Context, runID, reason string) (string, error) {
	to, err := c.engine.Terminate(ctx, runID, reason)
	return to, c.notFound(runID, err)
}

// SignalOptions adjust [Client.Signal]. The zero value works.
type SignalOptions struct {
	// DeliveryID deduplicates the signal: a repeated ID is accepted once. Empty generates one.
	DeliveryID string
}

// Signal delivers signal name with payload (encoded to JSON) to run runID and returns the ID of
// the run that received it: runID, or, if runID continued as new, the latest run it continued
// as. opts may be nil.
func (c *Client) Signal(ctx context.Context, runID, name string, payload any, opts *SignalOptions) (string, error) {
	if opts == nil {
		opts = &SignalOptions{}
	}
	p, err := encode(payload)
	if err != nil {
		return "", fmt.Errorf("%w: encoding the signal payload: %w", ErrInvalidInput, err)
	}
	id := opts.DeliveryID
	if id == "" {
		id = nats.NewInbox()[len(nats.InboxPrefix):]
	}
	to, err := c.engine.Signal(ctx, runID, name, p, id)
	return to, c.notFound(runID, err)
}

func (c *Client) notFound(runID string, err error) error {
	if errors.Is(err, core.ErrNotFound) && !strings.Contains(err.Error(), "flow runs") {
		return fmt.Errorf("%w (list runs with `flow runs`)", err)
	}
	return err
}

// Runs returns the runs index, most recently updated first.
func (c *Client) Runs(ctx context.Context) ([]RunSummary, error) {
	w, err := c.runs.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []RunSummary
	for e := range w.Updates() {
		if e == nil {
			break
		}
		var s RunSummary
		if err := json.Unmarshal(e.Value(), &s); err != nil {
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b RunSummary) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	return out, nil
}
