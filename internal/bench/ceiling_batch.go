package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// ceiling-batch: JetStream's atomic batch publish (ADR-50), the candidate for many runs' appends
// sharing one fsync.

// batchSizes are the batch sizes ceiling-batch measures, each for half of the repetition.
var batchSizes = []int{16, 256}

// batchWriters is how many batches ceiling-batch keeps in flight.
const batchWriters = 16

// runCeilingBatch: for each of batchSizes, batchWriters goroutines publish atomic batches of that
// many 400-byte messages for r.n/2 milliseconds, each message to its own subject with the
// expected-last-subject-sequence check Flow's commits carry (a batch is a commit of that many
// runs); appends_per_s_b<size> counts messages, batches_per_s_b<size> batches.
func runCeilingBatch(r *rep) (_ map[string]float64, err error) {
	drop, err := r.ceilingStreamFor(true)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, drop()) }()
	m := map[string]float64{}
	r.begin()
	for _, size := range batchSizes {
		var msgs, batches atomic.Int64
		t0 := time.Now()
		deadline := t0.Add(time.Duration(r.n/len(batchSizes)) * time.Millisecond)
		err := parallel(r.ctx, batchWriters, func(g int) error {
			prefix := fmt.Sprintf("%sb%d.%d.", ceilingPrefix, size, g)
			if r.ceilingParts > 1 { // a batch is atomic within one stream: writer g's in stream g mod the partitions
				prefix = fmt.Sprintf("%s%d.b%d.%d.", ceilingPrefix, g%r.ceilingParts, size, g)
			}
			n, err := r.batchLoop(size, prefix, deadline)
			msgs.Add(int64(n * size))
			batches.Add(int64(n))
			return err
		})
		if err != nil {
			return nil, err
		}
		secs := time.Since(t0).Seconds()
		m["appends_per_s_b"+strconv.Itoa(size)] = float64(msgs.Load()) / secs
		m["batches_per_s_b"+strconv.Itoa(size)] = float64(batches.Load()) / secs
	}
	r.end()
	return m, nil
}

// batchLoop publishes atomic batches of size messages, message i to subject prefix+i expecting
// that subject's previous message, until deadline; it returns how many batches it published.
func (r *rep) batchLoop(size int, prefix string, deadline time.Time) (int, error) {
	payload := []byte(strings.Repeat("x", ceilingMsgSize))
	last := make([]uint64, size)
	msgs := make([]*nats.Msg, size)
	n := 0
	for time.Now().Before(deadline) {
		for i := range msgs {
			msgs[i] = &nats.Msg{Subject: prefix + strconv.Itoa(i), Data: payload, Header: nats.Header{}}
			msgs[i].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last[i], 10))
		}
		ack, err := jetstreamext.PublishMsgBatch(r.ctx, r.st.js, msgs, jetstreamext.BatchFlowControl{})
		if err != nil {
			return n, fmt.Errorf("publishing a batch of %d to %s*: %w", size, prefix, err)
		}
		// A batch is stored as consecutive messages, ending at the ack's sequence.
		for i := range last {
			last[i] = ack.Sequence - uint64(size-1-i)
		}
		n++
	}
	return n, nil
}
