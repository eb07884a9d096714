package core

import (
	"maps"
	"slices"
)

// Clone returns a deep copy of the snapshot that shares no mutable state with s: applying
// events to either leaves the other as it was. JSON documents and other values that Apply only
// ever replaces (inputs, outputs, the spec, the outcome) are shared. Clone costs time linear in
// the snapshot's size; it lets a reader (a query) hold a run's state while its driver goes on.
// Clone must not run concurrently with Apply on s.
func (s *Snapshot) Clone() *Snapshot {
	c := *s
	c.ahead = nil
	c.Steps = make(map[string]*Step, len(s.Steps))
	for id, st := range s.Steps {
		cp := *st
		cp.prev, cp.next = nil, nil
		c.Steps[id] = &cp
	}
	c.unsettled = stepList{}
	for st := s.unsettled.first; st != nil; st = st.next {
		c.unsettled.push(c.Steps[st.ID])
	}
	c.stepBatches = cloneBatches(s.stepBatches, func(st *Step) *Step { return c.Steps[st.ID] })
	c.Waits = cloneValues(s.Waits)
	c.SignalWaits = cloneValues(s.SignalWaits)
	c.Hooks = cloneValues(s.Hooks)
	c.Children = cloneValues(s.Children)
	c.childBatches = cloneBatches(s.childBatches, func(ch *Child) *Child { return c.Children[ch.ID] })
	c.Signals = make([]*Signal, len(s.Signals))
	for i, sig := range s.Signals {
		cp := *sig
		c.Signals[i] = &cp
	}
	c.SideEffects = cloneValues(s.SideEffects)
	c.Upserts = cloneValues(s.Upserts)
	for _, u := range c.Upserts {
		u.Attributes = maps.Clone(u.Attributes)
	}
	c.Attributes = maps.Clone(s.Attributes)
	c.Updates = cloneValues(s.Updates)
	c.updateOrder = slices.Clone(s.updateOrder)
	c.undecided = slices.Clone(s.undecided)
	if s.Blocked != nil {
		b := *s.Blocked
		c.Blocked = &b
	}
	if s.Outcome != nil {
		o := *s.Outcome
		c.Outcome = &o
	}
	c.ids = maps.Clone(s.ids)
	c.batches = maps.Clone(s.batches) // member lists are never changed once recorded
	c.awaiting = cloneSlices(s.awaiting)
	c.buffered = cloneSlices(s.buffered)
	c.deliveries = maps.Clone(s.deliveries)
	c.tokens = maps.Clone(s.tokens)
	c.exhausted = slices.Clone(s.exhausted)
	c.inputTraces = slices.Clone(s.inputTraces)
	c.Resets = slices.Clone(s.Resets)
	c.Paused = s.Paused.clone()
	c.pauseDeliveries = maps.Clone(s.pauseDeliveries)
	return &c
}

// cloneBatches copies a map of batches, each member replaced by its copy, which copy returns.
// The copy is a map even where m is nil.
func cloneBatches[V any](m map[uint64][]*V, copy func(*V) *V) map[uint64][]*V {
	c := make(map[uint64][]*V, len(m))
	for seq, members := range m {
		cm := make([]*V, len(members))
		for i, v := range members {
			cm[i] = copy(v)
		}
		c[seq] = cm
	}
	return c
}

// cloneValues copies a map of pointers to structs, and the structs.
func cloneValues[K comparable, V any](m map[K]*V) map[K]*V {
	if m == nil {
		return nil
	}
	c := make(map[K]*V, len(m))
	for k, v := range m {
		cp := *v
		c[k] = &cp
	}
	return c
}

// cloneSlices copies a map of slices, and the slices, which Apply appends to.
func cloneSlices[K comparable, V any](m map[K][]V) map[K][]V {
	if m == nil {
		return nil
	}
	c := make(map[K][]V, len(m))
	for k, v := range m {
		c[k] = slices.Clone(v)
	}
	return c
}
