package engine

import (
	"sync"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/lru"
)

// runLocks serialises the drivers of each run within one engine. Entries exist while held.
type runLocks struct {
	mu sync.Mutex
	m  map[string]*runLock
}

type runLock struct {
	mu   sync.Mutex
	refs int
	// poke wakes the run's active driver: something was appended to the run by someone else.
	poke chan struct{}
	// driving is set while a driver holds the run and may still take joined tasks; want is the
	// highest sequence a joined task asked it to read. Both are guarded by runLocks.mu.
	driving bool
	want    uint64
	// reads takes the requests of readers (ReadSnapshot) for a copy of the run's snapshot: the
	// active driver answers them while it waits for its steps, between two changes.
	reads chan chan *core.Snapshot
}

// lock blocks until the caller holds run id, as its active driver.
func (l *runLocks) lock(id string) *runLock {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*runLock{}
	}
	rl, ok := l.m[id]
	if !ok {
		rl = &runLock{poke: make(chan struct{}, 1), reads: make(chan chan *core.Snapshot)}
		l.m[id] = rl
	}
	rl.refs++
	l.mu.Unlock()
	rl.mu.Lock()
	l.mu.Lock()
	rl.driving, rl.want = true, 0
	l.mu.Unlock()
	return rl
}

// join hands a task at sequence seq to the active driver of run id, if any.
func (l *runLocks) join(id string, seq uint64) bool {
	l.mu.Lock()
	rl, ok := l.m[id]
	joined := ok && rl.driving
	if joined {
		rl.want = max(rl.want, seq)
	}
	l.mu.Unlock()
	if joined {
		select {
		case rl.poke <- struct{}{}:
		default:
		}
	}
	return joined
}

// driving reports whether run id has an active driver.
func (l *runLocks) driving(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	rl, ok := l.m[id]
	return ok && rl.driving
}

// leave ends rl's holder's time as active driver, unless a joined task wants a sequence after
// seq: then it returns that sequence and false, and the driver must read it and go on.
func (l *runLocks) leave(rl *runLock, seq uint64) (want uint64, left bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if want := rl.want; want > seq {
		rl.want = 0 // the driver reads up to want now; a later join asks again
		return want, false
	}
	rl.driving = false
	return 0, true
}

// tryLock takes run id if nobody holds it.
func (l *runLocks) tryLock(id string) (*runLock, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*runLock{}
	}
	if rl, held := l.m[id]; held {
		return rl, false
	}
	rl := &runLock{poke: make(chan struct{}, 1), reads: make(chan chan *core.Snapshot), refs: 1}
	rl.mu.Lock()
	l.m[id] = rl
	return rl, true
}

func (l *runLocks) unlock(id string, rl *runLock) {
	l.mu.Lock()
	rl.driving = false
	l.mu.Unlock()
	rl.mu.Unlock()
	l.mu.Lock()
	rl.refs--
	if rl.refs == 0 {
		delete(l.m, id)
	}
	l.mu.Unlock()
}

// poke wakes the driver holding run id, if any.
func (l *runLocks) poke(id string) {
	l.mu.Lock()
	rl, ok := l.m[id]
	l.mu.Unlock()
	if ok {
		select {
		case rl.poke <- struct{}{}:
		default:
		}
	}
}

// cache holds the snapshots of hot runs, least recently used first out. A snapshot taken from the
// cache is owned by the holder of its run's lock until it is put back or dropped.
type cache struct {
	mu  sync.Mutex
	max int
	lru *lru.Cache[string, cacheEntry]
}

type cacheEntry struct {
	s *core.Snapshot
	// driven is set once a driver loaded the snapshot: verified by replay and repaired.
	driven bool
}

func newCache(max int) *cache {
	return &cache{max: max, lru: lru.New[string, cacheEntry](max)}
}

// get returns the cached snapshot of run id, if any, and whether a driver loaded it.
func (c *cache) get(id string) (*core.Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ce, _ := c.lru.Get(id)
	return ce.s, ce.driven
}

func (c *cache) put(id string, s *core.Snapshot, driven bool) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Put(id, cacheEntry{s: s, driven: driven})
}

func (c *cache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(id)
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
