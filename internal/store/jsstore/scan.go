package jsstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/flowrun/flow/internal/backend/streams"
)

// scanBatch is the number of messages ScanAll reads per direct-get request.
const scanBatch = 1000

// maxScanRounds bounds how often ScanAll goes back for messages appended while it read.
const maxScanRounds = 100

// ErrScanBehind is returned by ScanAll when appends keep arriving faster than it reads them.
var ErrScanBehind = errors.New("jsstore: the history stream grows faster than a scan reads it; try again when it is quieter")

// ScanAll calls fn with every message of FLOW_HISTORY, every run's, in stream order, until it
// has read every message the stream's leader holds when it stops: what any replica lacks is
// read from the leader, and messages appended while it reads are read too. It reads with
// batched direct gets; a message purged while it reads may be missed. It returns the last
// stream sequence read. An error from fn stops it.
func (s *Store) ScanAll(ctx context.Context, fn func(*jetstream.RawStreamMsg) error) (uint64, error) {
	subject := streams.HistorySubject(">")
	start, last := uint64(1), uint64(0)
	for range maxScanRounds {
		for {
			msgs, err := jetstreamext.GetBatch(ctx, s.js, streams.History, scanBatch,
				jetstreamext.GetBatchSeq(start), jetstreamext.GetBatchSubject(subject))
			if err != nil {
				return last, fmt.Errorf("scanning stream %s: %w", streams.History, err)
			}
			n := 0
			for m, err := range msgs {
				if errors.Is(err, jetstreamext.ErrNoMessages) {
					break
				}
				if err != nil {
					return last, fmt.Errorf("scanning stream %s: %w", streams.History, err)
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
		m, err := s.leader.next(ctx, subject, start)
		if err != nil {
			return last, fmt.Errorf("scanning stream %s at its leader: %w", streams.History, err)
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
