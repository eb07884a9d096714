package jsstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// scanBatch is the number of messages ScanAll reads per direct-get request.
const scanBatch = 1000

// maxScanRounds bounds how often ScanAll goes back for messages appended while it read.
const maxScanRounds = 100

// ErrScanBehind is returned by ScanAll when appends keep arriving faster than it reads them.
var ErrScanBehind = errors.New("jsstore: the history stream grows faster than a scan reads it; try again when it is quieter")

// ScanAll calls fn with every message of the history streams, every run's: each partition's in
// stream order, partition 0 first, until it has read every message the stream's leader holds
// when it stops: what any replica lacks is read from the leader, and messages appended while it
// reads are read too. It reads with batched direct gets; a message purged while it reads may be
// missed. It returns the last stream sequence read of the last partition. An error from fn
// stops it.
func (s *Store) ScanAll(ctx context.Context, fn func(*jetstream.RawStreamMsg) error) (uint64, error) {
	var last uint64
	for p := range s.layout.Partitions() {
		var err error
		if last, err = s.scanPartition(ctx, p, fn); err != nil {
			return last, err
		}
	}
	return last, nil
}

// scanPartition is ScanAll for partition p.
func (s *Store) scanPartition(ctx context.Context, p int, fn func(*jetstream.RawStreamMsg) error) (uint64, error) {
	subject, stream := s.layout.Filter(p), s.layout.Stream(p)
	leader := leaderReader{nc: s.nc, stream: stream}
	start, last := uint64(1), uint64(0)
	for range maxScanRounds {
		for {
			msgs, err := jetstreamext.GetBatch(ctx, s.js, stream, scanBatch,
				jetstreamext.GetBatchSeq(start), jetstreamext.GetBatchSubject(subject))
			if err != nil {
				return last, fmt.Errorf("scanning stream %s: %w", stream, err)
			}
			n := 0
			for m, err := range msgs {
				if errors.Is(err, jetstreamext.ErrNoMessages) {
					break
				}
				if err != nil {
					return last, fmt.Errorf("scanning stream %s: %w", stream, err)
				}
				n++
				start, last = m.Sequence+1, m.Sequence
				if err := fn(m); err != nil {
					return last, err
				}
			}
			if n < scanBatch {
				break
			}
		}
		// The replica that answered is at its end: is the leader?
		m, err := leader.next(ctx, subject, start)
		if err != nil {
			return last, fmt.Errorf("scanning stream %s at its leader: %w", stream, err)
		}
		if m == nil {
			return last, nil
		}
		start, last = m.Sequence+1, m.Sequence
		if err := fn(m); err != nil {
			return last, err
		}
	}
	return last, ErrScanBehind
}
