package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/payload"
	"github.com/flowrun/flow/pkg/event"
)

// The CloudEvents headers of a history commit the tap reads (internal/store/jsstore writes
// them): the sequence of the commit's first event and the number of its events.
const (
	headerFirstSeq = "ce-flowseq"
	headerCount    = "ce-flowcount"
)

// Commit is one FLOW_HISTORY message as the tap saw it.
type Commit struct {
	// StreamSeq is the message's stream sequence, At the time the server stored it.
	StreamSeq uint64
	At        time.Time
	RunID     string
	// First and Last are the run sequences of its first and last event.
	First, Last uint64
	Events      []event.Envelope
	// Payloads holds the offloaded payloads the events refer to, by their hex SHA-256, read
	// from FLOW_PAYLOADS when the tap saw the commit (the object is durable before the commit
	// that refers to it is appended).
	Payloads map[string]json.RawMessage
}

// Tap follows the history streams from their first messages with an ordered consumer each,
// keeping every commit (each run's in its order; runs of different partitions interleave), so that the checker knows the events of runs that retention later purges. It reads
// the stream itself, through no Flow code but the event catalogue. It is safe for concurrent
// use.
type Tap struct {
	ccs    []jetstream.ConsumeContext
	ctx    context.Context
	js     jetstream.JetStream
	layout streams.Layout
	// obs and read are add's, under addMu (each partition's consumer calls it one message at a
	// time): the payload store, once opened, and the payloads read so far (content-addressed:
	// a copy in a later commit is not read again).
	addMu sync.Mutex
	obs   jetstream.ObjectStore
	read  map[string]json.RawMessage

	mu      sync.Mutex
	commits []Commit
	last    time.Time // when the latest message arrived (wall clock), for quiet spells
	errs    []string
}

// StartTap starts following the history streams.
func StartTap(ctx context.Context, js jetstream.JetStream) (*Tap, error) {
	layout, err := streams.Load(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("torture: %w", err)
	}
	t := &Tap{last: time.Now(), ctx: ctx, js: js, layout: layout, read: map[string]json.RawMessage{}}
	for p, name := range layout.Streams() {
		cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{layout.Filter(p)}, DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			t.Stop()
			return nil, fmt.Errorf("torture: tapping %s: %w", name, err)
		}
		cc, err := cons.Consume(t.add)
		if err != nil {
			t.Stop()
			return nil, fmt.Errorf("torture: tapping %s: %w", name, err)
		}
		t.ccs = append(t.ccs, cc)
	}
	return t, nil
}

func (t *Tap) add(m jetstream.Msg) {
	t.addMu.Lock()
	defer t.addMu.Unlock()
	c, err := t.decodeCommit(m)
	var perr error
	if err == nil {
		c.Payloads, perr = t.payloads(c)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = time.Now()
	if err != nil {
		t.errs = append(t.errs, err.Error())
		return
	}
	if perr != nil {
		t.errs = append(t.errs, perr.Error())
	}
	t.commits = append(t.commits, c)
}

// payloadReadTimeout bounds the reads of one commit's offloaded payloads (a replica may be
// restarting).
const payloadReadTimeout = 30 * time.Second

// payloads reads the offloaded payloads commit c's events refer to, each checked against its
// hash. A payload that cannot be read is lost: an error the checker reports.
func (t *Tap) payloads(c Commit) (map[string]json.RawMessage, error) {
	var refs []payload.Ref
	for _, e := range c.Events {
		payload.Refs(e.Payload, func(r payload.Ref) { refs = append(refs, r) })
	}
	if len(refs) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(t.ctx, payloadReadTimeout)
	defer cancel()
	out := map[string]json.RawMessage{}
	for _, r := range refs {
		if data, ok := t.read[r.SHA256]; ok {
			out[r.SHA256] = data
			continue
		}
		var data []byte
		err := retry(ctx, func() error {
			if t.obs == nil {
				obs, err := t.js.ObjectStore(ctx, streams.PayloadsBucket)
				if err != nil {
					return err
				}
				t.obs = obs
			}
			var err error
			data, err = t.obs.GetBytes(ctx, r.Name())
			return err
		})
		switch {
		case err != nil:
			return out, fmt.Errorf("stream message %d of run %q refers to payload %s, which does not read: %w", c.StreamSeq, c.RunID, r, err)
		case !r.Matches(data):
			return out, fmt.Errorf("stream message %d of run %q refers to payload %s; the object holds other bytes", c.StreamSeq, c.RunID, r)
		}
		out[r.SHA256], t.read[r.SHA256] = data, data
	}
	return out, nil
}

// notFoundGrace is how long a payload object reported missing is read again: on a cluster a
// follower that lags answers a read of an object the leader stored a moment ago with "not
// found" (its commit, which refers to it, is stored after it).
const notFoundGrace = 5 * time.Second

// retry calls fn until it succeeds, it reports an object that is not there for notFoundGrace,
// or ctx ends.
func retry(ctx context.Context, fn func() error) error {
	var missing time.Time
	for {
		err := fn()
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			if missing.IsZero() {
				missing = time.Now()
			}
			if time.Since(missing) >= notFoundGrace {
				return err
			}
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (t *Tap) decodeCommit(m jetstream.Msg) (Commit, error) {
	md, err := m.Metadata()
	if err != nil {
		return Commit{}, fmt.Errorf("message on %s: no metadata: %w", m.Subject(), err)
	}
	runID, ok := t.layout.RunOf(m.Subject())
	if !ok {
		return Commit{}, fmt.Errorf("message on %s: not a run's history subject", m.Subject())
	}
	c := Commit{StreamSeq: md.Sequence.Stream, At: md.Timestamp.UTC(), RunID: runID}
	first, err1 := strconv.ParseUint(m.Headers().Get(headerFirstSeq), 10, 64)
	count, err2 := strconv.ParseUint(m.Headers().Get(headerCount), 10, 64)
	if err1 != nil || err2 != nil || first == 0 || count == 0 {
		return c, fmt.Errorf("stream message %d of run %q: bad %s/%s headers %q/%q", c.StreamSeq, runID, headerFirstSeq, headerCount,
			m.Headers().Get(headerFirstSeq), m.Headers().Get(headerCount))
	}
	c.First, c.Last = first, first+count-1
	envs, err := event.DecodeEnvelopes(m.Data())
	if err != nil {
		return c, fmt.Errorf("stream message %d of run %q: %w", c.StreamSeq, runID, err)
	}
	if uint64(len(envs)) != count {
		return c, fmt.Errorf("stream message %d of run %q: headers say %d events, the body holds %d", c.StreamSeq, runID, count, len(envs))
	}
	for i, e := range envs {
		if e.RunID != runID || e.Seq != first+uint64(i) {
			return c, fmt.Errorf("stream message %d of run %q: event %d is seq %d of run %q, want seq %d", c.StreamSeq, runID, i, e.Seq, e.RunID, first+uint64(i))
		}
	}
	c.Events = envs
	return c, nil
}

// Snapshot returns the commits seen so far, in stream order, and the messages that could not
// be decoded.
func (t *Tap) Snapshot() ([]Commit, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Commit(nil), t.commits...), append([]string(nil), t.errs...)
}

// Quiet returns how long no message arrived.
func (t *Tap) Quiet() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Since(t.last)
}

// Stop stops following.
func (t *Tap) Stop() {
	for _, cc := range t.ccs {
		cc.Stop()
	}
}
