package lru_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/lru"
)

func TestCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	c := lru.New[string, int](2)
	c.Put("a", 1)
	c.Put("b", 2)
	_, _ = c.Get("a") // b is now the least recently used
	c.Put("c", 3)
	_, ok := c.Get("b")
	require.False(t, ok, "b was evicted")
	v, ok := c.Get("a")
	require.True(t, ok)
	require.Equal(t, 1, v)
	c.Put("a", 10) // an update marks a used too, and does not grow the cache
	c.Put("d", 4)
	_, ok = c.Get("c")
	require.False(t, ok, "c was evicted")
	v, _ = c.Get("a")
	require.Equal(t, 10, v)
	require.Equal(t, 2, c.Len())
	c.Remove("a")
	c.Remove("absent")
	require.Equal(t, 1, c.Len())
}

func TestCacheHoldsAtLeastOne(t *testing.T) {
	t.Parallel()
	c := lru.New[int, int](0)
	c.Put(1, 1)
	c.Put(2, 2)
	require.Equal(t, 1, c.Len())
	v, ok := c.Get(2)
	require.True(t, ok)
	require.Equal(t, 2, v)
}
