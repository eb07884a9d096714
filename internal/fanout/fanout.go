// Package fanout calls a function over the indexes 0..n-1 from a fixed number of goroutines, as
// benchmarks and load generators do to keep a set number of requests in flight.
package fanout

import (
	"context"
	"sync"
)

// Each calls fn(0) .. fn(n-1), in order of index, from at most workers goroutines (at least
// one), and returns the first error fn returned, or ctx's error if ctx ended first. After an
// error or the end of ctx it starts no more calls; it returns once every call it started has
// returned. fn must be safe for concurrent use.
func Each(ctx context.Context, workers, n int, fn func(i int) error) error {
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		stop  = make(chan struct{})
	)
	fail := func(err error) {
		once.Do(func() {
			first = err
			close(stop)
		})
	}
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					fail(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-stop:
			break feed
		case <-ctx.Done():
			fail(ctx.Err())
			break feed
		}
	}
	close(next)
	wg.Wait()
	return first
}
