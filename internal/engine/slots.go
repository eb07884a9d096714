package engine

import (
	"container/heap"
	"context"
	"sync"
)

// stepSlots caps the step attempts running at once in an engine. A freed slot goes to the
// waiting attempt of the run with the highest priority (event.RunStarted.Priority), first come
// first served within a priority.
type stepSlots struct {
	mu      sync.Mutex
	free    int
	waiters slotWaiters
	order   uint64
}

func newStepSlots(n int) *stepSlots { return &stepSlots{free: n} }

// tryAcquire takes a slot if one is free and nobody waits for it.
func (s *stepSlots) tryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		return true
	}
	return false
}

// acquire takes a slot, waiting behind the waiters of higher priority, or returns ctx's error.
func (s *stepSlots) acquire(ctx context.Context, priority int) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	s.order++
	w := &slotWaiter{priority: priority, order: s.order, ready: make(chan struct{}), index: -1}
	heap.Push(&s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if w.index < 0 {
			// Handed a slot as ctx ended: give it on.
			s.releaseLocked()
		} else {
			heap.Remove(&s.waiters, w.index)
		}
		return ctx.Err()
	}
}

// release frees a slot, handing it to the first waiter.
func (s *stepSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *stepSlots) releaseLocked() {
	if len(s.waiters) > 0 {
		w := heap.Pop(&s.waiters).(*slotWaiter)
		close(w.ready)
		return
	}
	s.free++
}

type slotWaiter struct {
	priority int
	order    uint64
	ready    chan struct{}
	index    int
}

// slotWaiters is a heap: highest priority first, then first come.
type slotWaiters []*slotWaiter

func (h slotWaiters) Len() int { return len(h) }
func (h slotWaiters) Less(i, j int) bool {
	if h[i].priority != h[j].priority {
		return h[i].priority > h[j].priority
	}
	return h[i].order < h[j].order
}
func (h slotWaiters) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *slotWaiters) Push(x any) {
	w := x.(*slotWaiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *slotWaiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
