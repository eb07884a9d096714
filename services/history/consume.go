package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/lru"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/wait"
	"github.com/flowrun/flow/pkg/event"
)

// consumerConfig is the history service's durable consumer of history partition p's stream,
// shared by every replica.
func consumerConfig(layout streams.Layout, p int, ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: streams.HistoryConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxDeliver: -1, MaxAckPending: 20_000,
		FilterSubject: layout.Filter(p), Description: "Flow history service: the consequences of every commit",
	}
}

// fetchBatch bounds the commits pulled at once.
const fetchBatch = 1000

// consume starts the lanes and, for each history partition, the goroutine that pulls its
// commits and hands each to its run's lane. A run's commits are all in one partition, and a
// lane takes them from one puller, in stream order.
// Pulls are clustered: the first commit that ends a quiet spell is held for a linger
// (Config.Linger) and applied with whatever else arrived meanwhile, so that a run's commits made
// close together are applied together (its index entry written once, inputs its worker already
// decided on not resent), and the service's work does not interleave, commit by commit, with a
// worker that drives a run. Writers' fast paths carry the latency-critical consequences, so
// nothing waits on the linger in the common case.
func (s *Service) consume(ctx context.Context) error {
	conss := make([]jetstream.Consumer, s.layout.Partitions())
	for p := range conss {
		cons, err := s.js.CreateOrUpdateConsumer(ctx, s.layout.Stream(p), consumerConfig(s.layout, p, s.cfg.AckWait))
		if err != nil {
			return fmt.Errorf("creating the history consumer of stream %s: %w", s.layout.Stream(p), err)
		}
		conss[p] = cons
	}
	perLane := max(1, s.cfg.CacheSize/s.cfg.Lanes)
	s.lanes = make([]*lane, s.cfg.Lanes)
	for i := range s.lanes {
		l := &lane{s: s, jobs: make(chan job, fetchBatch), cache: newRunCache(perLane), feed: newFeed(s.nc)}
		s.lanes[i] = l
		s.workers.Go(func() { l.run(ctx) })
	}
	s.consuming.Store(true)
	for _, cons := range conss {
		s.workers.Go(func() { s.pull(ctx, cons) })
	}
	return nil
}

// pull hands commits to lanes until ctx ends: a long poll for the first commit after a quiet
// spell, held for a linger, then whatever else arrived, until the stream is drained.
func (s *Service) pull(ctx context.Context, cons jetstream.Consumer) {
	retry := 100 * time.Millisecond
	quiet := true
	var held []jetstream.Msg
	for ctx.Err() == nil {
		var batch jetstream.MessageBatch
		var err error
		if quiet {
			batch, err = cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		} else {
			batch, err = cons.FetchNoWait(fetchBatch)
		}
		var msgs []jetstream.Msg
		if err == nil {
			for m := range batch.Messages() {
				msgs = append(msgs, m)
			}
			err = batch.Error()
		}
		if quiet && len(msgs) > 0 && s.cfg.Linger > 0 {
			// Hold the first commit for the linger, and apply it with what follows.
			held, quiet = msgs, false
			wait.For(ctx, s.cfg.Linger)
			continue
		}
		n := len(msgs)
		if len(held) > 0 {
			msgs, held = append(held, msgs...), nil
		}
		for _, m := range msgs {
			runID, _ := s.layout.RunOf(m.Subject())
			select {
			case s.laneOf(runID).jobs <- job{msg: m}:
			case <-ctx.Done():
				return
			}
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			s.logger.Warn("pulling commits failed; retrying", slog.String("error", err.Error()), slog.Duration("in", retry))
			wait.For(ctx, retry)
			retry = min(2*retry, 5*time.Second)
			continue
		}
		retry = 100 * time.Millisecond
		switch {
		case n == fetchBatch:
			quiet = false // more are waiting: pull them at once
		case n > 0 && s.cfg.Linger > 0:
			quiet = false
			wait.For(ctx, s.cfg.Linger)
		default:
			quiet = n == 0
		}
	}
}

// laneOf returns the lane that applies run runID's commits.
func (s *Service) laneOf(runID string) *lane {
	h := fnv.New32a()
	_, _ = h.Write([]byte(runID))
	return s.lanes[h.Sum32()%uint32(len(s.lanes))]
}

// onLane runs fn on run runID's lane, after the commits queued there, and waits for it.
func (s *Service) onLane(ctx context.Context, runID string, fn func(context.Context, *lane) error) error {
	done := make(chan error, 1)
	select {
	case s.laneOf(runID).jobs <- job{fn: fn, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// job is a commit to apply, or a function to run in a lane's order.
type job struct {
	msg  jetstream.Msg
	fn   func(context.Context, *lane) error
	done chan error
}

// lane applies the commits of its runs one at a time, in the order the stream holds them. It
// owns its cache and its feed: nothing else touches them.
type lane struct {
	s     *Service
	jobs  chan job
	cache *runCache
	feed  *feed
}

// maxBatch bounds the commits a lane takes at once.
const maxBatch = 256

// run applies the lane's jobs in order. Commits that are queued together are applied as a batch:
// each run's commits in order, derived from the run's state after the last of them, with one
// index write per run. Under load batches grow, so the history service writes less per commit.
func (l *lane) run(ctx context.Context) {
	var batch []jetstream.Msg
	for {
		var j job
		select {
		case j = <-l.jobs:
		case <-ctx.Done():
			return
		}
		// Take everything queued: commits pulled together are applied together.
		for {
			if j.fn != nil {
				l.process(ctx, batch)
				batch = batch[:0]
				j.done <- j.fn(ctx, l)
			} else {
				batch = append(batch, j.msg)
			}
			if len(batch) == maxBatch {
				break
			}
			var more bool
			select {
			case j, more = <-l.jobs:
			default:
			}
			if !more {
				break
			}
		}
		l.process(ctx, batch)
		batch = batch[:0]
	}
}

// pending is one message of a batch: a commit, unless ok is false (no commit headers).
type pending struct {
	msg jetstream.Msg
	c   store.Commit
	ok  bool
	// pos is the message's stream sequence; 0 if unknown.
	pos uint64
}

// process applies a batch of commits, run by run, retrying each run's commits in place until
// they are applied, so that later commits of the run wait for them, then acknowledges them. A
// commit not acknowledged (the service stops, or dies) is applied again by whichever replica
// JetStream hands it to.
func (l *lane) process(ctx context.Context, batch []jetstream.Msg) {
	if len(batch) == 0 {
		return
	}
	var order []string
	byRun := map[string][]pending{}
	for _, m := range batch {
		runID, _ := l.s.layout.RunOf(m.Subject())
		if err := event.ValidateDerivedRunID(runID); err != nil {
			// No run has this subject: nothing reads it, and there is nothing to quarantine.
			l.s.logger.Error("skipping a history message on a subject that names no run", slog.String("subject", m.Subject()),
				slog.String("error", err.Error()))
			_ = m.Term()
			continue
		}
		// A message without commit headers is kept: apply judges the run's history by reading it.
		c, ok := jsstore.CommitOf(runID, m.Headers(), m.Data())
		p := pending{msg: m, c: c, ok: ok}
		if md, err := m.Metadata(); err == nil {
			p.pos = md.Sequence.Stream
		}
		if _, seen := byRun[runID]; !seen {
			order = append(order, runID)
		}
		byRun[runID] = append(byRun[runID], p)
	}
	for _, runID := range order {
		commits := byRun[runID]
		for attempt := 0; ; attempt++ {
			err := l.apply(ctx, runID, commits)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, store.ErrDamaged) {
				l.s.logger.Error("not applying commits of a quarantined run", slog.String("run_id", runID), slog.String("error", err.Error()))
				break
			}
			backoff := min(100*time.Millisecond<<min(attempt, 6), 5*time.Second)
			l.s.logger.Warn("applying commits failed; retrying", slog.String("run_id", runID), slog.Uint64("seq", commits[0].c.First),
				slog.String("error", err.Error()), slog.Duration("in", backoff))
			for _, p := range commits {
				_ = p.msg.InProgress()
			}
			if !wait.For(ctx, backoff) {
				return
			}
		}
		for _, p := range commits {
			if err := l.s.cfg.Faults.Hit(fault.HistoryBeforeAck); err != nil {
				continue // as if the ack were lost: JetStream redelivers the commit after AckWait
			}
			_ = p.msg.Ack()
		}
		l.s.applied.add(int64(len(commits)))
	}
}

// apply derives and applies the consequences of commits, consecutive messages of run runID,
// given the run's state after the last of them, and writes the run's index entry once. A message
// that is not a commit following what the lane holds of the run (no commit headers, a body that
// does not decode, sequences that repeat or skip, events that break the history's invariants),
// and a repair, are judged by reading the run's whole history (resync).
func (l *lane) apply(ctx context.Context, runID string, commits []pending) error {
	s := l.s
	f := l.cache.get(runID)
	type decoded struct {
		envs     []event.Envelope
		payloads []json.RawMessage
		// whole, set when the commit made the lane read the whole history of a run that has
		// not ended (cold), is that history: the commit's consequences are derived from all of
		// it, since an earlier commit of the run may not have been applied yet. JetStream
		// redelivers a commit a replica took and never acknowledged (it died) after the
		// commits that followed it, and the lane, having read past it, would take it for a
		// redelivery of an applied one.
		whole []event.Envelope
	}
	var todo []decoded
	for i, p := range commits {
		if !p.ok || jsstore.IsRepair(p.msg.Headers()) {
			return l.resync(ctx, runID, commits)
		}
		c := p.c
		// read: the lane's state of the run was read past this very message.
		read := f != nil && (p.pos == 0 || f.pos == 0 || p.pos <= f.pos)
		if read && c.Last <= f.derived {
			continue // applied already; this is a redelivery
		}
		envs, payloads, err := jsstore.DecodeCommit(c.RunID, c.First, c.Last, p.msg.Data())
		if err != nil {
			return l.resync(ctx, runID, commits)
		}
		if err := s.store.VerifyInputs(runID, p.pos, p.msg.Headers(), envs, payloads); err != nil {
			// An input event no input writer signed (a worker's forgery, or a writer without
			// the key): the run's history is damaged from this commit on, and stops here.
			l.cache.drop(runID)
			return s.quarantineDamaged(ctx, runID, fmt.Sprintf("stream %s: %v", s.layout.StreamOf(runID), err), s.salvaged(ctx, runID))
		}
		if envs[0].Type() == event.TypeRunDeleted {
			// The run's deletion: nothing follows it, and its consequences are the rest of the
			// deletion (retention.go).
			// The commits before it in this batch were applied before the sweeper recorded it
			// (it deletes only a run whose every commit this service applied).
			l.cache.drop(runID)
			f, todo = nil, nil
			if err := s.finishDeletion(ctx, runID); err != nil {
				return err
			}
			l.feed.publishDeleted(envs[0], payloads[0])
			continue
		}
		switch {
		case read && f.s.Seq >= c.Last:
			// A cold load read past this commit: derive from the later state.
		case f != nil && f.s.Seq+1 == c.First:
			if err := f.s.ApplyAll(envs); err != nil {
				l.cache.drop(c.RunID)
				return l.resync(ctx, runID, commits)
			}
			f.pos = p.pos
		case f == nil && c.First == 1 && !s.indexedStarted(runID) && l.latest(ctx, runID, commits[i:]):
			// A new run, whose whole history so far is its first commit and the batch's
			// commits after it, which follow in turn.
			snap, err := core.Project(c.RunID, envs)
			if err != nil {
				return l.resync(ctx, runID, commits)
			}
			f = &followed{s: snap, fresh: true, pos: p.pos}
			l.cache.put(c.RunID, f)
		default:
			var hist []event.Envelope
			if f, hist, err = l.load(ctx, c.RunID, c.Last); errors.Is(err, store.ErrDeleted) {
				// Deleted since: the sweeper deletes only a run whose every commit this service
				// applied, so this one is a redelivery. The deletion's own commit follows.
				f = nil
				continue
			} else if err != nil {
				return err
			}
			if !f.s.Terminal() {
				// An ended run's consequences are its end's (derived from its latest snapshot
				// whatever commit brings them): the earlier ones ran their course.
				todo = append(todo, decoded{envs, payloads, hist})
				continue
			}
		}
		todo = append(todo, decoded{envs, payloads, nil})
	}
	if len(todo) == 0 || f == nil {
		return nil
	}
	if err := s.cfg.Faults.Hit(fault.HistoryBeforeEffects); err != nil {
		return err
	}
	for _, d := range todo {
		derive := d.envs
		if d.whole != nil {
			derive = d.whole
			s.registerHooks(ctx, f.s)
		}
		if err := s.engine.ApplyCommit(ctx, f.s, derive); err != nil {
			return err
		}
		if err := s.control.apply(ctx, f.s, derive); err != nil {
			return err
		}
		l.feed.publish(f, d.envs, d.payloads)
	}
	if err := s.cfg.Faults.Hit(fault.HistoryBeforeIndex); err != nil {
		return err
	}
	if err := s.writeIndex(ctx, runID, f); err != nil {
		return err
	}
	f.derived = max(f.derived, todo[len(todo)-1].envs[len(todo[len(todo)-1].envs)-1].Seq)
	l.checkpoint(ctx, f, todo[0].envs[0].Seq-1)
	if f.s.Terminal() {
		// Nothing follows an end: a redelivered commit of the run reads it again.
		l.cache.drop(runID)
	}
	return nil
}

// latest reports whether commits, a run's first commit and the batch's commits of the run after
// it, are the run's whole history in the stream: each delivered for the first time and
// continuing the one before, the last with nothing after it. A redelivery (a lost ack, a
// restart, another replica) or a run that went on past the batch is derived from its whole
// history instead: the first commit alone would bring back consequences its later commits undid
// (the queue entry of a run that was admitted and ended).
func (l *lane) latest(ctx context.Context, runID string, commits []pending) bool {
	n := 0
	for j, p := range commits {
		md, err := p.msg.Metadata()
		if err != nil || md.NumDelivered > 1 || !p.ok || p.pos == 0 || j > 0 && p.c.First != commits[j-1].c.Last+1 {
			break
		}
		n = j + 1
	}
	if n == 0 {
		return false
	}
	last, err := l.s.store.LastStreamSeq(ctx, runID)
	return err == nil && last == commits[n-1].pos
}

// load projects run runID's whole history, read up to at least atLeast, into the lane's cache,
// and returns it with that history.
// A history that does not project (a gap, an event that breaks an invariant) is damaged: the
// run is quarantined.
func (l *lane) load(ctx context.Context, runID string, atLeast uint64) (*followed, []event.Envelope, error) {
	hist, err := l.s.store.LoadAtLeast(ctx, runID, 0, atLeast)
	var snap *core.Snapshot
	if err == nil {
		snap, err = core.Project(runID, hist)
	}
	var he *core.HistoryError
	if errors.Is(err, event.ErrMalformed) || errors.As(err, &he) {
		return nil, nil, l.s.quarantineDamaged(ctx, runID, fmt.Sprintf("stream %s: %v", l.s.layout.StreamOf(runID), err), l.s.salvaged(ctx, runID))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("loading run %q: %w", runID, err)
	}
	f := &followed{s: snap}
	if seq, pos, ok := l.s.store.Position(runID); ok && seq == snap.Seq {
		f.pos = pos
	}
	l.cache.put(runID, f)
	return f, hist, nil
}

// followed is what a lane knows of a run: its latest snapshot, the last sequence whose
// consequences are applied, what it published on the feed and what the runs index holds.
type followed struct {
	s       *core.Snapshot
	derived uint64
	// pos is the stream sequence of the last message s holds; 0 if unknown. A later message
	// must continue s, or the run's history is read again.
	pos uint64
	// rewrite is set when the index entry must be replaced even if it names a later sequence:
	// a repaired run went back to its valid prefix.
	rewrite bool
	// published is the last sequence published on the feed.
	published uint64
	// fresh is set for a run this lane saw start: its index entry does not exist yet.
	fresh bool
	// indexed is the runs index entry as last read or written, at revision indexRev; known
	// reports whether it was read or written (else it must be read first).
	indexed  core.Summary
	indexRev uint64
	known    bool
}

// runCache is a lane's least recently used cache of followed runs. Not safe for concurrent use.
type runCache struct{ c *lru.Cache[string, *followed] }

func newRunCache(max int) *runCache { return &runCache{c: lru.New[string, *followed](max)} }

func (c *runCache) get(id string) *followed {
	f, _ := c.c.Get(id)
	return f
}

func (c *runCache) put(id string, f *followed) { c.c.Put(id, f) }

func (c *runCache) drop(id string) { c.c.Remove(id) }

// countingSignal counts, and lets tests wait for a count.
type countingSignal struct {
	mu   sync.Mutex
	n    int64
	wake chan struct{}
}

func (c *countingSignal) add(d int64) {
	c.mu.Lock()
	c.n += d
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
	c.mu.Unlock()
}

func (c *countingSignal) load() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countingSignal) wait(ctx context.Context, n int64) error {
	for {
		c.mu.Lock()
		if c.n >= n {
			c.mu.Unlock()
			return nil
		}
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
