// Package lru is a map of bounded size that evicts its least recently used entry first, for the
// caches that only save reads (snapshots of hot runs, followed runs).
package lru

import "container/list"

// Cache maps keys to values, holding at most its size's worth of entries. Get and Put mark an
// entry used. A Cache is not safe for concurrent use: its owner serialises calls.
type Cache[K comparable, V any] struct {
	max   int
	order *list.List // most recently used first; values are *entry[K, V]
	m     map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// New returns an empty cache of at most size entries (at least one).
func New[K comparable, V any](size int) *Cache[K, V] {
	return &Cache[K, V]{max: max(1, size), order: list.New(), m: map[K]*list.Element{}}
}

// Get returns the value of key and whether the cache holds it.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	el, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry[K, V]).val, true
}

// Put sets the value of key, evicting the least recently used entries beyond the size.
func (c *Cache[K, V]) Put(key K, val V) {
	if el, ok := c.m[key]; ok {
		el.Value.(*entry[K, V]).val = val
		c.order.MoveToFront(el)
		return
	}
	c.m[key] = c.order.PushFront(&entry[K, V]{key: key, val: val})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.m, last.Value.(*entry[K, V]).key)
	}
}

// Remove deletes key; an absent key is no error.
func (c *Cache[K, V]) Remove(key K) {
	if el, ok := c.m[key]; ok {
		c.order.Remove(el)
		delete(c.m, key)
	}
}

// Len returns the number of entries.
func (c *Cache[K, V]) Len() int { return c.order.Len() }
