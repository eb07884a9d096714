package history

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/fault"
	"github.com/flowrun/flow/internal/store"
	"github.com/flowrun/flow/internal/store/jsstore"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// consumerConfig is the history service's durable consumer of the history stream, shared by
// every replica.
func consumerConfig(ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: streams.HistoryConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxDeliver: -1, MaxAckPending: 20_000,
		FilterSubject: streams.HistorySubject(">"), Description: "Flow history service: the consequences of every commit",
	}
}

// consume starts the lanes and the goroutine that hands each commit to its run's lane.
func (s *Service) consume(ctx context.Context) error {
	cons, err := s.js.CreateOrUpdateConsumer(ctx, streams.History, consumerConfig(s.cfg.AckWait))
	if err != nil {
		return fmt.Errorf("creating the history consumer: %w", err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("consuming the history stream: %w", err)
	}
	perLane := max(1, s.cfg.CacheSize/s.cfg.Lanes)
	s.lanes = make([]*lane, s.cfg.Lanes)
	for i := range s.lanes {
		l := &lane{s: s, jobs: make(chan job, 256), cache: newRunCache(perLane)}
		s.lanes[i] = l
		s.workers.Go(func() { l.run(ctx) })
	}
	s.consuming.Store(true)
	s.workers.Go(func() {
		<-ctx.Done()
		iter.Stop()
	})
	s.workers.Go(func() {
		for {
			m, err := iter.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					s.logger.Error("consuming the history stream stopped", slog.String("error", err.Error()))
				}
				return
			}
			runID, _ := strings.CutPrefix(m.Subject(), streams.HistorySubject(""))
			select {
			case s.laneOf(runID).jobs <- job{msg: m}:
			case <-ctx.Done():
				return
			}
		}
	})
	return nil
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
// owns its cache: nothing else touches it.
type lane struct {
	s     *Service
	jobs  chan job
	cache *runCache
}

func (l *lane) run(ctx context.Context) {
	for {
		select {
		case j := <-l.jobs:
			if j.fn != nil {
				j.done <- j.fn(ctx, l)
				continue
			}
			l.process(ctx, j.msg)
		case <-ctx.Done():
			return
		}
	}
}

// process applies one commit, retrying in place until it is applied, so that the run's later
// commits wait for it, then acknowledges it. A commit not acknowledged (the service stops, or
// dies) is applied again by whichever replica JetStream hands it to.
func (l *lane) process(ctx context.Context, m jetstream.Msg) {
	runID, _ := strings.CutPrefix(m.Subject(), streams.HistorySubject(""))
	c, ok := jsstore.CommitOf(runID, m.Headers(), m.Data())
	if !ok {
		l.s.logger.Error("skipping a history message without commit headers", slog.String("subject", m.Subject()))
		_ = m.Term()
		return
	}
	for attempt := 0; ; attempt++ {
		err := l.apply(ctx, c)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPermanent) || errors.Is(err, store.ErrDamaged) {
			l.s.logger.Error("not applying a commit", slog.String("run_id", runID), slog.Uint64("seq", c.First), slog.String("error", err.Error()))
			break
		}
		wait := min(100*time.Millisecond<<min(attempt, 6), 5*time.Second)
		l.s.logger.Warn("applying a commit failed; retrying", slog.String("run_id", runID), slog.Uint64("seq", c.First),
			slog.String("error", err.Error()), slog.Duration("in", wait))
		_ = m.InProgress()
		if !sleep(ctx, wait) {
			return
		}
	}
	if err := l.s.cfg.Faults.Hit(fault.HistoryBeforeAck); err != nil {
		return // as if the ack were lost: JetStream redelivers the commit after AckWait
	}
	_ = m.Ack()
	l.s.applied.add(1)
}

// apply derives and applies the consequences of commit c, given its run's latest snapshot.
func (l *lane) apply(ctx context.Context, c store.Commit) error {
	s := l.s
	f := l.cache.get(c.RunID)
	if f != nil && c.Last <= f.derived {
		return nil // applied already; this is a redelivery
	}
	envs, err := c.Events()
	if err != nil {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	switch {
	case f != nil && f.s.Seq >= c.Last:
		// A cold load read past this commit: derive from the later state.
	case f != nil && f.s.Seq+1 == c.First:
		if err := f.s.ApplyAll(envs); err != nil {
			l.cache.drop(c.RunID)
			return err
		}
	case f == nil && c.First == 1:
		// A new run: its first commit is its whole history so far.
		snap, err := core.Project(c.RunID, envs)
		if err != nil {
			return fmt.Errorf("%w: %w", errPermanent, err)
		}
		f = &followed{s: snap, fresh: true}
		l.cache.put(c.RunID, f)
	default:
		if f, err = l.load(ctx, c.RunID, c.Last); err != nil {
			return err
		}
	}
	if err := s.cfg.Faults.Hit(fault.HistoryBeforeEffects); err != nil {
		return err
	}
	if err := s.engine.ApplyCommit(ctx, f.s, envs); err != nil {
		return err
	}
	s.feed.publish(f, envs)
	if err := s.cfg.Faults.Hit(fault.HistoryBeforeIndex); err != nil {
		return err
	}
	if err := s.writeIndex(ctx, c.RunID, f); err != nil {
		return err
	}
	f.derived = c.Last
	return nil
}

// load projects run runID's whole history, read up to at least atLeast, into the lane's cache.
// A history that does not project (a gap, an event that breaks an invariant) is damaged: the
// run is quarantined.
func (l *lane) load(ctx context.Context, runID string, atLeast uint64) (*followed, error) {
	hist, err := l.s.store.LoadAtLeast(ctx, runID, 0, atLeast)
	var snap *core.Snapshot
	if err == nil {
		snap, err = core.Project(runID, hist)
	}
	var he *core.HistoryError
	if errors.Is(err, event.ErrMalformed) || errors.As(err, &he) {
		if qerr := l.s.quarantine(ctx, runID, fmt.Sprintf("stream %s: %v", streams.History, err)); qerr != nil {
			return nil, qerr
		}
		return nil, &store.DamagedError{RunID: runID, Reason: err.Error()}
	}
	if err != nil {
		return nil, fmt.Errorf("loading run %q: %w", runID, err)
	}
	f := &followed{s: snap}
	l.cache.put(runID, f)
	return f, nil
}

// followed is what a lane knows of a run: its latest snapshot, the last sequence whose
// consequences are applied, what it published on the feed and what the runs index holds.
type followed struct {
	s       *core.Snapshot
	derived uint64
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
type runCache struct {
	max   int
	order *list.List
	m     map[string]*list.Element
}

type cacheItem struct {
	id string
	f  *followed
}

func newRunCache(max int) *runCache {
	return &runCache{max: max, order: list.New(), m: map[string]*list.Element{}}
}

func (c *runCache) get(id string) *followed {
	if el, ok := c.m[id]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*cacheItem).f
	}
	return nil
}

func (c *runCache) put(id string, f *followed) {
	if el, ok := c.m[id]; ok {
		el.Value.(*cacheItem).f = f
		c.order.MoveToFront(el)
		return
	}
	c.m[id] = c.order.PushFront(&cacheItem{id: id, f: f})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.m, last.Value.(*cacheItem).id)
	}
}

func (c *runCache) drop(id string) {
	if el, ok := c.m[id]; ok {
		c.order.Remove(el)
		delete(c.m, id)
	}
}

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

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
