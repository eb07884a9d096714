// Package jsstore is the JetStream event store: stream FLOW_HISTORY, subject flow.history.<run>,
// one message per commit; or, on a history spread over several streams (streams.Layout),
// the run's partition's stream FLOW_HISTORY_<p>, subject flow.history.<p>.<run>.
//
// # Messages
//
// A commit of events expected+1..expected+n is one message whose body is the JSON array of their
// envelopes. It is a CloudEvent in NATS binary mode: ce-specversion, ce-id "<run>:<first seq>",
// ce-source, ce-type "dev.flow.commit", ce-time (of the last event), ce-subject (the run ID),
// ce-datacontenttype, and the extensions ce-flowseq (first sequence), ce-flowcount (events),
// ce-flowtypes (the events' types, comma-separated, in order) and ce-flowcommit (a random ID of
// this append attempt), plus the distributed-tracing extension, ce-traceparent (and
// ce-tracestate), when the context carries a span (a drive's carries its run's trace). It is
// written from the CloudEvents SDK's event model (package internal/cloudevent).

// A commit that holds input events (signals, hook deliveries, updates, cancellation requests
// but a parent's, operator pauses, unpauses) written by an input writer carries their HMAC in
// the Flow-Input-Signature header (inputs.go, internal/inputsig).
//
// # Concurrency
//
// Appends use Nats-Expected-Last-Subject-Sequence with the stream sequence of the run's last
// commit, and Nats-Msg-Id "<run>:<first seq>". A sequence mismatch (server codes 10071 and, on
// replicated streams, 10164, or 10158 for a message ID another publish is still proposing)
// becomes store.ErrConflict, unless the run's commit after the expected position is this very
// append (ce-flowcommit), as after a retried publish whose first ack was lost.
//
// # Reads
//
// Load reads with batched direct gets (ADR-31), starting after the last commit this store saw of
// the run, so a worker holding a run's snapshot reads only the tail. Any replica answers direct
// gets, so on a replicated stream a read can miss the newest commits; LoadAtLeast, the conflict
// checks and the settling of an append whose ack was lost read what they must see from the
// stream's leader ($JS.API.STREAM.MSG.GET), which only the leader answers.
//
// Every message must be a commit whose first sequence follows the last sequence of the message
// before it: a history with any other message (written by hand or by a faulty writer) does not
// read back, and the error matches store.ErrDamaged. A repair, a commit that begins with
// run.damage_accepted, voids the run's messages between the last message of the history's
// valid prefix and itself (repair.go).
package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/cloudevent"
	"github.com/flowrun/flow/internal/inputsig"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/wait"
	"github.com/flowrun/flow/pkg/event"
)

// CloudEvents headers of history messages.
var (
	HeaderType     = cloudevent.HeaderType
	HeaderFirstSeq = cloudevent.ExtensionHeader(extSeq)
	HeaderCount    = cloudevent.ExtensionHeader(extCount)
	HeaderTypes    = cloudevent.ExtensionHeader(extTypes)
	HeaderCommit   = cloudevent.ExtensionHeader(extCommit)
)

const (
	extSeq    = "flowseq"
	extCount  = "flowcount"
	extTypes  = "flowtypes"
	extCommit = "flowcommit"
)

// CommitType is the ce-type of a commit. Commits written before ce-flowtypes existed have
// TypePrefix and the type of their last event.
const CommitType = "dev.flow.commit"

// TypePrefix prefixes event types in the ce-type of older commits.
const TypePrefix = "dev.flow."

// Options configure a Store. The zero value works.
type Options struct {
	// Source is the ce-source of appended messages. Defaults to "flow".
	Source string
	// Positions bounds how many runs' last stream positions are remembered. Defaults to 100,000.
	Positions int
	// Unsigned makes a store that neither signs the input events it appends nor checks the
	// input signatures of what it reads (inputs.go): a worker's, whose role may not read the
	// signing key. Otherwise New reads the key from bucket FLOW_SECRETS, creating it if it does
	// not exist yet (inputsig.Load).
	Unsigned bool
	// InputKey, if set, is the input signing key, instead of FLOW_SECRETS's. For tests.
	InputKey *inputsig.Key
	// AfterPublish, a test seam, sees the outcome of every publish of a commit and returns the
	// outcome Append acts on: a test makes an ack get lost by returning a timeout. Nil in
	// production.
	AfterPublish func(msg *nats.Msg, ack *jetstream.PubAck, err error) (*jetstream.PubAck, error)
}

// Store is a store.EventStore and a store.Follower on JetStream. It refuses the runs listed in
// FLOW_DAMAGED with a *store.DamagedError. It is safe for concurrent use.
type Store struct {
	js           jetstream.JetStream
	nc           *nats.Conn
	layout       streams.Layout
	source       types.URIRef
	max          int
	afterPublish func(*nats.Msg, *jetstream.PubAck, error) (*jetstream.PubAck, error)
	quarantine   *quarantine
	// inputs is the input signing key; nil for an unsigned store.
	inputs *inputsig.Key

	// streams are the history streams' handles, by partition, each opened once.
	streams []lazyStream

	mu  sync.Mutex
	pos map[string]position

	// read counts the history messages loads read (MessagesRead).
	read atomic.Uint64
}

// position is the last commit of a run this store saw: its last event's sequence and its
// message's stream sequence.
type position struct{ runSeq, streamSeq uint64 }

var (
	_ store.EventStore = (*Store)(nil)
	_ store.Follower   = (*Store)(nil)
)

// New returns a store on js. Flow's streams must exist (streams.Ensure). opts may be nil.
func New(ctx context.Context, js jetstream.JetStream, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	layout, err := streams.Load(ctx, js)
	if err != nil {
		return nil, err
	}
	q, err := watchQuarantine(ctx, js)
	if err != nil {
		return nil, err
	}
	inputs := opts.InputKey
	if inputs == nil && !opts.Unsigned {
		if inputs, err = inputsig.Load(ctx, js); err != nil {
			return nil, err
		}
	}
	source := opts.Source
	if source == "" {
		source = "flow"
	}
	s := &Store{js: js, nc: js.Conn(), layout: layout, streams: make([]lazyStream, layout.Partitions()), source: cloudevent.Source(source),
		max: opts.Positions, afterPublish: opts.AfterPublish, quarantine: q, inputs: inputs, pos: map[string]position{}}
	if s.max == 0 {
		s.max = 100_000
	}
	return s, nil
}

// Append implements store.EventStore.
func (s *Store) Append(ctx context.Context, runID string, expected uint64, events ...event.Event) (uint64, error) {
	if err := store.CheckAppend(runID, events); err != nil {
		return 0, err
	}
	if err := s.quarantine.check(ctx, runID); err != nil {
		return 0, err
	}
	first, last := expected+1, expected+uint64(len(events))
	envs := make([]event.Envelope, len(events))
	for i, e := range events {
		envs[i] = event.Envelope{RunID: runID, Seq: first + uint64(i), Time: e.Time.UTC(), Payload: e.Payload}
	}
	body, err := event.MarshalEnvelopes(envs)
	if err != nil {
		return 0, fmt.Errorf("encoding commit of run %q: %w", runID, err)
	}
	commit := nuid.Next()
	msg := s.message(ctx, runID, envs, body, commit)
	msgID := runID + ":" + strconv.FormatUint(first, 10)

	for attempt := 0; ; attempt++ {
		expectedStream, err := s.streamSeqOf(ctx, runID, expected)
		if err != nil {
			return 0, err
		}
		ack, err := s.publish(ctx, msg, expectedStream, msgID)
		switch {
		case err == nil && !ack.Duplicate:
			s.remember(runID, last, ack.Sequence)
			return last, nil
		case err == nil, isWrongLastSequence(err):
			// A duplicate or a sequence mismatch: the commit may be ours from an earlier attempt.
			n, after, serr := s.settle(ctx, runID, expected, expectedStream, last, commit)
			if serr != nil && !after && attempt < inFlightAttempts {
				// The leader refused the expected sequence, yet holds nothing after it: a message
				// on the run's subject was in flight (proposed, not yet applied: ours, or another
				// writer's), which a clustered stream refuses expected-sequence checks behind.
				// Once it lands, the next attempt is a duplicate (ours) or a real conflict.
				if !wait.For(ctx, time.Millisecond<<attempt) {
					return 0, ctx.Err()
				}
				continue
			}
			return n, serr
		case attempt < 2 && transient(err, ctx):
			// The ack was lost or the server was briefly away: find out whether it committed.
			n, _, err := s.settle(ctx, runID, expected, expectedStream, last, commit)
			var ce *store.ConflictError
			if errors.As(err, &ce) && ce.Actual == expected {
				continue // it did not: publish again
			}
			return n, err
		default:
			return 0, fmt.Errorf("appending to run %q: %w", runID, err)
		}
	}
}

// inFlightAttempts bounds the publishes of a commit refused behind a message in flight on its
// run's subject (about a second of waits in all).
const inFlightAttempts = 10

// publish sends one commit. Options.AfterPublish, a test seam, may replace its outcome.
func (s *Store) publish(ctx context.Context, msg *nats.Msg, expectedStream uint64, msgID string) (*jetstream.PubAck, error) {
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(expectedStream), jetstream.WithMsgID(msgID))
	if s.afterPublish != nil {
		return s.afterPublish(msg, ack, err)
	}
	return ack, err
}

// message builds the CloudEvents binary-mode message of a commit.
func (s *Store) message(ctx context.Context, runID string, envs []event.Envelope, body []byte, commit string) *nats.Msg {
	var types strings.Builder
	for i, e := range envs {
		if i > 0 {
			types.WriteByte(',')
		}
		types.WriteString(string(e.Type()))
	}
	first := strconv.FormatUint(envs[0].Seq, 10)
	ec := cloudevent.NewContext(s.source, CommitType)
	ec.ID, *ec.Subject, ec.Time.Time = runID+":"+first, runID, envs[len(envs)-1].Time
	ec.Extensions[extSeq], ec.Extensions[extCount] = first, strconv.Itoa(len(envs))
	ec.Extensions[extTypes], ec.Extensions[extCommit] = types.String(), commit
	cloudevent.SetTraceExtension(ctx, ec)
	h := make(nats.Header, 12)
	cloudevent.WriteHeaders(ec, h, make([]string, 0, 12))
	s.sign(h, runID, envs, body)
	return &nats.Msg{Subject: s.layout.Subject(runID), Header: h, Data: body}
}

// settle decides the outcome of an append whose result is unknown, from the stream's leader:
// committed if the run's commit right after stream sequence expectedStream (the commit that
// ended at run sequence expected) is this one, even if other writers appended after it; else
// a conflict reporting the run's actual last sequence. after reports whether the leader held
// a message on the run's subject after expectedStream: without one, a conflict whose actual
// sequence is the expected one may only mean that a message was still in flight.
func (s *Store) settle(ctx context.Context, runID string, expected, expectedStream, last uint64, commit string) (n uint64, after bool, err error) {
	s.forget(runID)
	m, err := s.leaderOf(runID).next(ctx, s.layout.Subject(runID), expectedStream+1)
	if err != nil {
		return 0, true, fmt.Errorf("reading the commit of run %q after seq %d: %w", runID, expected, err)
	}
	if m != nil && m.Header.Get(HeaderCommit) == commit {
		if first, _ := strconv.ParseUint(m.Header.Get(HeaderFirstSeq), 10, 64); first == expected+1 {
			return last, true, nil
		}
	}
	actual, _, err := s.last(ctx, runID)
	if err != nil {
		return 0, true, err
	}
	return 0, m != nil || actual != expected, &store.ConflictError{RunID: runID, Expected: expected, Actual: actual}
}

// last reads the run's last commit from the stream's leader and remembers its position. It
// returns sequence 0 and a nil message for a run without events.
func (s *Store) last(ctx context.Context, runID string) (uint64, *jetstream.RawStreamMsg, error) {
	m, err := s.leaderOf(runID).last(ctx, s.layout.Subject(runID))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the last commit of run %q: %w", runID, err)
	}
	if m == nil {
		return 0, nil, nil
	}
	seq, err := lastSeq(m)
	if err != nil {
		return 0, nil, err
	}
	s.remember(runID, seq, m.Sequence)
	return seq, m, nil
}

// streamSeqOf returns the stream sequence of the commit that ends at run sequence expected, or
// a conflict if the run's last commit ends elsewhere.
func (s *Store) streamSeqOf(ctx context.Context, runID string, expected uint64) (uint64, error) {
	if expected == 0 {
		return 0, nil
	}
	s.mu.Lock()
	p, ok := s.pos[runID]
	s.mu.Unlock()
	if ok && p.runSeq == expected {
		return p.streamSeq, nil
	}
	actual, m, err := s.last(ctx, runID)
	if err != nil {
		return 0, err
	}
	if actual != expected {
		return 0, &store.ConflictError{RunID: runID, Expected: expected, Actual: actual}
	}
	return m.Sequence, nil
}

// Load implements store.EventStore with batched direct gets, which any replica answers.
func (s *Store) Load(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	return s.LoadAtLeast(ctx, runID, after, 0)
}

// LastCommit returns the events of run runID's last commit, read with one direct get of the
// run's last message, whatever its history's length: nil for a run without events. A replica
// that lags may answer with an earlier commit.
func (s *Store) LastCommit(ctx context.Context, runID string) ([]event.Envelope, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	if err := s.quarantine.check(ctx, runID); err != nil {
		return nil, err
	}
	st, err := s.HistoryOf(ctx, runID)
	if err != nil {
		return nil, err
	}
	m, err := st.GetLastMsgForSubject(ctx, s.layout.Subject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the last commit of run %q: %w", runID, err)
	}
	c, ok := CommitOf(runID, m.Header, m.Data)
	if !ok {
		return nil, fmt.Errorf("%w: stream message %d of run %q has no commit headers", event.ErrMalformed, m.Sequence, runID)
	}
	return c.Events()
}

// LastStreamSeq returns the stream sequence of run runID's last message, read with one direct
// get (0 for a run without messages). A replica that lags may answer with an earlier one.
func (s *Store) LastStreamSeq(ctx context.Context, runID string) (uint64, error) {
	st, err := s.HistoryOf(ctx, runID)
	if err != nil {
		return 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, s.layout.Subject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the last commit of run %q: %w", runID, err)
	}
	return m.Sequence, nil
}

// Where returns the stream and the subject that hold run runID's events.
func (s *Store) Where(runID string) (stream, subject string) {
	return s.layout.StreamOf(runID), s.layout.Subject(runID)
}

// Layout returns how the history is spread over streams.
func (s *Store) Layout() streams.Layout { return s.layout }

// lazyStream is a stream's handle, opened by the first call that succeeds: a failed open (NATS
// away for a moment) is tried again by the next call.
type lazyStream struct {
	st atomic.Pointer[jetstream.Stream]
}

// HistoryOf returns the handle of the history stream that holds run runID's events.
func (s *Store) HistoryOf(ctx context.Context, runID string) (jetstream.Stream, error) {
	p := s.layout.Partition(runID)
	ls := &s.streams[p]
	if st := ls.st.Load(); st != nil {
		return *st, nil
	}
	st, err := s.js.Stream(ctx, s.layout.Stream(p))
	if err != nil {
		return nil, err
	}
	ls.st.CompareAndSwap(nil, &st)
	return *ls.st.Load(), nil
}

// leaderOf returns the reader of the leader of the stream that holds run runID's events.
func (s *Store) leaderOf(runID string) leaderReader {
	return leaderReader{nc: s.nc, stream: s.layout.StreamOf(runID)}
}

// Follow implements store.Follower with a core NATS subscription on the run's subject: every
// commit published there reaches it, typically before the stream has stored it.
func (s *Store) Follow(runID string, fn func(store.Commit)) (func(), error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	stopped := false
	sub, err := s.nc.Subscribe(s.layout.Subject(runID), func(m *nats.Msg) {
		c, ok := CommitOf(runID, m.Header, m.Data)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			fn(c)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("following run %q: %w", runID, err)
	}
	return func() {
		_ = sub.Unsubscribe()
		mu.Lock()
		stopped = true
		mu.Unlock()
	}, nil
}

// CommitOf returns the commit notice of a history message with headers h and body data, or
// false if the headers are not a commit's.
func CommitOf(runID string, h nats.Header, data []byte) (store.Commit, bool) {
	first, err := strconv.ParseUint(h.Get(HeaderFirstSeq), 10, 64)
	last, ok := LastSeq(h)
	if err != nil || !ok {
		return store.Commit{}, false
	}
	return store.Commit{RunID: runID, First: first, Last: last, Events: func() ([]event.Envelope, error) {
		envs, _, err := DecodeCommit(runID, first, last, data)
		return envs, err
	}}, true
}

// DecodeCommit decodes the body of a commit of run runID holding seq first..last, and returns its
// events, and the JSON of each event's payload as stored.
func DecodeCommit(runID string, first, last uint64, data []byte) ([]event.Envelope, []json.RawMessage, error) {
	raws, err := event.DecodeRawEnvelopes(data)
	if err != nil {
		return nil, nil, err
	}
	if len(raws) != int(last-first+1) || raws[0].Seq != first || raws[0].RunID != runID {
		return nil, nil, fmt.Errorf("%w: a commit of run %q does not hold seq %d..%d", event.ErrMalformed, runID, first, last)
	}
	envs := make([]event.Envelope, len(raws))
	payloads := make([]json.RawMessage, len(raws))
	for i, raw := range raws {
		env, err := raw.Decode()
		if err != nil {
			return nil, nil, err
		}
		envs[i], payloads[i] = env, raw.Data
	}
	return envs, payloads, nil
}

// Position returns the last commit of run runID this store has seen: the run sequence of its
// last event and its stream sequence.
func (s *Store) Position(runID string) (runSeq, streamSeq uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pos[runID]
	return p.runSeq, p.streamSeq, ok
}

func (s *Store) remember(runID string, runSeq, streamSeq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pos[runID]; ok && p.runSeq >= runSeq {
		return
	}
	if len(s.pos) >= s.max {
		for id := range s.pos {
			delete(s.pos, id)
			if len(s.pos) < s.max*9/10 {
				break
			}
		}
	}
	s.pos[runID] = position{runSeq: runSeq, streamSeq: streamSeq}
}

func (s *Store) forget(runID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pos, runID)
}

// lastSeq returns the run sequence of the last event in a history message.
func lastSeq(m *jetstream.RawStreamMsg) (uint64, error) {
	seq, ok := LastSeq(m.Header)
	if !ok {
		return 0, fmt.Errorf("%w: stream message %d on %s lacks valid %s/%s headers", event.ErrMalformed, m.Sequence, m.Subject, HeaderFirstSeq, HeaderCount)
	}
	return seq, nil
}

// LastSeq returns the run sequence of the last event of the history message with headers h.
func LastSeq(h nats.Header) (uint64, bool) {
	first, err1 := strconv.ParseUint(h.Get(HeaderFirstSeq), 10, 64)
	count, err2 := strconv.ParseUint(h.Get(HeaderCount), 10, 64)
	if err1 != nil || err2 != nil || count == 0 {
		return 0, false
	}
	return first + count - 1, true
}

// transient reports a publish error after which the append may or may not have committed.
func transient(err error, ctx context.Context) bool {
	return ctx.Err() == nil && (errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders))
}

// isWrongLastSequence reports a refused append whose commit may be another writer's or ours: a
// sequence mismatch (code 10071, or 10164 on replicated streams), or, on replicated streams, a
// message ID still being proposed by another publish of the same commit sequence (10158).
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == 10071 || apiErr.ErrorCode == 10164 || apiErr.ErrorCode == 10158)
}
