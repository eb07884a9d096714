package streams

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxPartitions bounds Config.Partitions: the streams a history may be spread over.
const MaxPartitions = 64

// Metadata keys of a partitioned history stream (FLOW_HISTORY_<p>).
const (
	metaPartitions = "flow.partitions"
	metaPartition  = "flow.partition"
)

// Layout is how run histories are spread over streams. With one partition (the zero value) every
// run's events are on flow.history.<run> in stream FLOW_HISTORY. With n > 1 partitions, run r
// belongs to partition p = FNV-1a(r) mod n, and its events are on flow.history.<p>.<run> in
// stream FLOW_HISTORY_<p>: each partition has its own leader, its own sequence and its own
// consumer, and one run's events are all in one stream, so per-run order and optimistic
// concurrency are as with one stream. A stream sequence is a position within its partition only.
//
// The number of partitions is chosen when the streams are first created and never changes (a
// changed count would move runs between streams): every process learns it from the streams
// (Discover), not from its own configuration.
type Layout struct {
	n int // 0 means 1
}

// NewLayout returns the layout of n partitions (1 if n < 1).
func NewLayout(n int) Layout {
	if n <= 1 {
		return Layout{}
	}
	return Layout{n: n}
}

// Partitions returns the number of history streams.
func (l Layout) Partitions() int { return max(l.n, 1) }

// Partitioned reports whether the history is spread over more than one stream.
func (l Layout) Partitioned() bool { return l.n > 1 }

// Partition returns run runID's partition.
func (l Layout) Partition(runID string) int {
	if l.n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(runID))
	return int(h.Sum32() % uint32(l.n))
}

// Stream returns the name of partition p's stream.
func (l Layout) Stream(p int) string {
	if l.n <= 1 {
		return History
	}
	return History + "_" + strconv.Itoa(p)
}

// StreamOf returns the name of the stream that holds run runID's events.
func (l Layout) StreamOf(runID string) string { return l.Stream(l.Partition(runID)) }

// Streams returns the names of every history stream, partition 0 first.
func (l Layout) Streams() []string {
	names := make([]string, l.Partitions())
	for p := range names {
		names[p] = l.Stream(p)
	}
	return names
}

// Subject returns the subject of run runID's events.
func (l Layout) Subject(runID string) string {
	if l.n <= 1 {
		return historyPrefix + runID
	}
	return historyPrefix + strconv.Itoa(l.Partition(runID)) + "." + runID
}

// Filter returns the subject filter of every run's events in partition p.
func (l Layout) Filter(p int) string {
	if l.n <= 1 {
		return historyPrefix + ">"
	}
	return historyPrefix + strconv.Itoa(p) + ".>"
}

// AllRuns is the core NATS subscription subject of every run's events, in any layout: a
// process that follows commits as they are stored subscribes to it and takes run IDs with RunOf.
const AllRuns = historyPrefix + ">"

// RunOf returns the run ID of a history subject of this layout, and whether subject is one.
func (l Layout) RunOf(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, historyPrefix)
	if !ok || rest == "" {
		return "", false
	}
	if l.n <= 1 {
		return rest, !strings.Contains(rest, ".")
	}
	p, runID, ok := strings.Cut(rest, ".")
	if !ok || runID == "" || strings.Contains(runID, ".") {
		return "", false
	}
	if n, err := strconv.Atoi(p); err != nil || n != l.Partition(runID) {
		return "", false
	}
	return runID, true
}

func (l Layout) streamConfigs(d Config) []jetstream.StreamConfig {
	cfgs := make([]jetstream.StreamConfig, l.Partitions())
	for p := range cfgs {
		sc := jetstream.StreamConfig{
			Name: l.Stream(p), Subjects: []string{l.Filter(p)}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, Replicas: d.Replicas, Duplicates: d.DuplicateWindow,
			AllowDirect: true, MaxMsgSize: 8 << 20,
			Description: "Flow run histories: one message per commit on flow.history.<run>",
		}
		if l.Partitioned() {
			sc.Description = fmt.Sprintf("Flow run histories, partition %d of %d: one message per commit on flow.history.%d.<run>", p, l.n, p)
			sc.Metadata = map[string]string{metaPartitions: strconv.Itoa(l.n), metaPartition: strconv.Itoa(p)}
		}
		cfgs[p] = sc
	}
	return cfgs
}

// Discover returns the layout of the history streams on js, and whether any exists. It reads
// FLOW_HISTORY (one partition) or FLOW_HISTORY_0 and the partition count in its metadata.
func Discover(ctx context.Context, js jetstream.JetStream) (Layout, bool, error) {
	_, err := js.Stream(ctx, History)
	if err == nil {
		return Layout{}, true, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return Layout{}, false, fmt.Errorf("reading stream %s: %w", History, err)
	}
	st, err := js.Stream(ctx, NewLayout(2).Stream(0))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Layout{}, false, nil
	}
	if err != nil {
		return Layout{}, false, fmt.Errorf("reading stream %s: %w", NewLayout(2).Stream(0), err)
	}
	meta := st.CachedInfo().Config.Metadata[metaPartitions]
	n, err := strconv.Atoi(meta)
	if err != nil || n < 2 || n > MaxPartitions {
		return Layout{}, false, fmt.Errorf("%w: stream %s's metadata %s is %q, not a partition count between 2 and %d; it was not created by Flow",
			ErrConfig, st.CachedInfo().Config.Name, metaPartitions, meta, MaxPartitions)
	}
	return NewLayout(n), true, nil
}

// Load returns the layout of the history streams on js, with ErrNotProvisioned when none exists.
func Load(ctx context.Context, js jetstream.JetStream) (Layout, error) {
	l, ok, err := Discover(ctx, js)
	if err != nil {
		return Layout{}, err
	}
	if !ok {
		return Layout{}, fmt.Errorf("%w; start `flow dev`, or a Flow worker, against it first", ErrNotProvisioned)
	}
	return l, nil
}

// layoutFor returns the layout Ensure provisions: the existing one, which cfg.Partitions may
// only confirm, or cfg.Partitions' (default 1) where no history stream exists.
func layoutFor(ctx context.Context, js jetstream.JetStream, cfg Config) (Layout, error) {
	cur, ok, err := Discover(ctx, js)
	if err != nil {
		return Layout{}, err
	}
	if !ok {
		return NewLayout(cfg.Partitions), nil
	}
	if cfg.Partitions != 0 && cfg.Partitions != cur.Partitions() {
		return Layout{}, fmt.Errorf("%w: the history is spread over %d stream(s), and Partitions (FLOW_STREAMS_PARTITIONS) asks for %d; "+
			"the count is fixed when the streams are created (runs cannot move between streams): set it to %d or leave it unset",
			ErrConfig, cur.Partitions(), cfg.Partitions, cur.Partitions())
	}
	return cur, nil
}
