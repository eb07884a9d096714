package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/archive"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/pkg/event"
)

// State is the derived state the checker reads straight from the buckets, decoded into its own
// types (the fields it needs).
type State struct {
	// Index is the runs index: run ID -> entry.
	Index map[string]IndexEntry
	// Archives are the archived histories by run ID.
	Archives map[string][]event.Envelope
	// Payloads are the offloaded payloads the archives hold, by hex SHA-256.
	Payloads map[string]json.RawMessage
	// Holders are the flow-control slots: group entry key -> run ID -> key.
	Holders map[string]map[string]string
	// Queue lists the runs waiting for admission.
	Queue map[string]bool
	// Timers lists the timer entries by run ID.
	Timers map[string][]TimerEntry
	// Damaged lists the quarantined runs and why.
	Damaged map[string]string
	// Batches lists the batch jobs and their states.
	Batches map[string]string
	// Pending and AckPending are the history service consumer's.
	Pending, AckPending uint64
}

// TimerEntry is a FLOW_TIMERS entry: its key and when it is due.
type TimerEntry struct {
	Key string
	Due time.Time
}

func (t TimerEntry) String() string { return t.Key + " due " + t.Due.Format(timeFormat) }

// IndexEntry is the part of a runs index entry the checker reads.
type IndexEntry struct {
	RunID   string     `json:"run_id"`
	Status  string     `json:"status"`
	Seq     uint64     `json:"seq"`
	Deleted *Tombstone `json:"deleted,omitempty"`
}

// ReadState reads the buckets, between two reads of the history service's consumer: the
// buckets are read after every commit the first read counts as acknowledged was applied, and
// a state read while the service applied commits (the two reads differ) counts them as
// pending, so that settle reads again rather than judge buckets read before the service wrote
// what the commits caused (an index entry, a queue entry deleted on admission).
func ReadState(ctx context.Context, js jetstream.JetStream) (*State, error) {
	before, err := consumerProgress(ctx, js)
	if err != nil {
		return nil, err
	}
	st := &State{Index: map[string]IndexEntry{}, Archives: map[string][]event.Envelope{}, Payloads: map[string]json.RawMessage{}, Holders: map[string]map[string]string{},
		Queue: map[string]bool{}, Timers: map[string][]TimerEntry{}, Damaged: map[string]string{}, Batches: map[string]string{}}
	err = eachEntry(ctx, js, streams.RunsBucket, func(key string, v []byte) error {
		var e IndexEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("index entry %s: %w", key, err)
		}
		st.Index[key] = e
		return nil
	})
	if err == nil {
		err = eachEntry(ctx, js, streams.LimitsBucket, func(key string, v []byte) error {
			if !strings.HasPrefix(key, "g.") {
				return nil
			}
			var g struct {
				Holders map[string]struct {
					Key string `json:"key"`
				} `json:"holders"`
			}
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("limits entry %s: %w", key, err)
			}
			st.Holders[key] = map[string]string{}
			for run, h := range g.Holders {
				st.Holders[key][run] = h.Key
			}
			return nil
		})
	}
	if err == nil {
		err = eachEntry(ctx, js, streams.QueueBucket, func(key string, _ []byte) error {
			st.Queue[key] = true
			return nil
		})
	}
	if err == nil {
		err = eachEntry(ctx, js, streams.TimersBucket, func(key string, v []byte) error {
			var t struct {
				RunID string    `json:"run_id"`
				Due   time.Time `json:"due"`
			}
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("timer entry %s: %w", key, err)
			}
			st.Timers[t.RunID] = append(st.Timers[t.RunID], TimerEntry{Key: key, Due: t.Due})
			return nil
		})
	}
	if err == nil {
		err = eachEntry(ctx, js, streams.DamagedBucket, func(key string, v []byte) error {
			st.Damaged[key] = string(v)
			return nil
		})
	}
	if err == nil {
		err = eachEntry(ctx, js, streams.BatchesBucket, func(key string, v []byte) error {
			id, ok := strings.CutPrefix(key, "job.")
			if !ok {
				return nil
			}
			var j struct {
				State string `json:"state"`
			}
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("batch entry %s: %w", key, err)
			}
			st.Batches[id] = j.State
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	if err := st.readArchives(ctx, js); err != nil {
		return nil, err
	}
	if afterBuckets != nil {
		afterBuckets()
	}
	after, err := consumerProgress(ctx, js)
	if err != nil {
		return nil, err
	}
	st.Pending, st.AckPending = max(before.pending, after.pending), max(before.ackPending, after.ackPending)
	if after.ackFloor != before.ackFloor || after.delivered != before.delivered {
		st.Pending = max(st.Pending, 1) // applied while read: read again
	}
	return st, nil
}

// afterBuckets, set by tests only, runs between the buckets' read and the consumer's second.
var afterBuckets func()

// progress is where the history service's consumer stood at one read.
type progress struct {
	pending, ackPending uint64
	ackFloor, delivered uint64
}

// consumerProgress sums the progress of the history service's consumers, one per history
// partition: each of its positions only grows, so the sums change whenever one does.
func consumerProgress(ctx context.Context, js jetstream.JetStream) (progress, error) {
	layout, err := streams.Load(ctx, js)
	if err != nil {
		return progress{}, err
	}
	var pr progress
	for _, name := range layout.Streams() {
		cons, err := js.Consumer(ctx, name, streams.HistoryConsumer)
		if err != nil {
			return progress{}, fmt.Errorf("the history service's consumer of %s: %w", name, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return progress{}, fmt.Errorf("the history service's consumer of %s: %w", name, err)
		}
		pr.pending += info.NumPending
		pr.ackPending += uint64(info.NumAckPending)
		pr.ackFloor += info.AckFloor.Stream
		pr.delivered += info.Delivered.Stream
	}
	return pr, nil
}

func (st *State) readArchives(ctx context.Context, js jetstream.JetStream) error {
	obs, err := js.ObjectStore(ctx, streams.ArchiveBucket)
	if err != nil {
		return fmt.Errorf("object store %s: %w", streams.ArchiveBucket, err)
	}
	list, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing %s: %w", streams.ArchiveBucket, err)
	}
	for _, info := range list {
		// The archive's own format (a bare array of envelopes, or the history with its payloads)
		// is read by package archive: what the checker compares is the events.
		c, err := archive.ReadAll(ctx, js, archive.ObjectStore+":"+streams.ArchiveBucket+"/"+info.Name)
		if err != nil {
			return fmt.Errorf("archive %s does not read: %w", info.Name, err)
		}
		st.Archives[info.Name] = c.History
		for sum, data := range c.Payloads {
			st.Payloads[sum] = data
		}
	}
	return nil
}

// eachEntry calls fn with every key and value of bucket.
func eachEntry(ctx context.Context, js jetstream.JetStream, bucket string, fn func(key string, v []byte) error) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("listing %s: %w", bucket, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return fmt.Errorf("%s entry %s: %w", bucket, k, err)
		}
		if err := fn(k, e.Value()); err != nil {
			return err
		}
	}
	return nil
}

// Tombstones returns the tombstones of the runs index.
func (st *State) Tombstones() map[string]*Tombstone {
	out := map[string]*Tombstone{}
	for id, e := range st.Index {
		if e.Deleted != nil {
			out[id] = e.Deleted
		}
	}
	return out
}
