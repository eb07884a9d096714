// Package liveness tells which workers are alive and which workflow definitions they serve.
//
// Every worker keeps its own entry in the FLOW_WORKERS bucket (see Publish): key
// "<queue>.<worker id>", value a JSON Worker, written at start and every third of the bucket's
// TTL (streams.Config.WorkerTTL), deleted when the worker stops. The entry of a worker that dies
// without stopping expires with the bucket's TTL. A View follows the bucket in memory, with
// FLOW_DEFINITIONS (the latest registration of every definition, kept after its workers are
// gone), and answers without a round trip:
//
//	live, err := liveness.Watch(ctx, js, logger)
//	defer live.Stop()
//	def, err := live.Require(queue, "order") // errors.Is(err, liveness.ErrNoWorker) when none serves it
package liveness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Registration is one workflow definition a worker registers, with the patches its code knows.
type Registration struct {
	Definition string   `json:"definition"`
	Patches    []string `json:"patches,omitempty"`
	// Attributes are the search attributes the worker's code declares for the definition.
	Attributes []event.AttributeDecl `json:"attributes,omitempty"`
	// Control is the flow control the definition's runs start under (flow.WithFlowControl),
	// with its key path, not its key; nil for none. The ingress resolves it for each start.
	Control *event.FlowControl `json:"control,omitempty"`
	// Timeouts are the definition's default run timeouts (flow.WithRunTimeouts), durations
	// only; nil for none. The ingress applies them to a start that sets none.
	Timeouts *event.RunTimeouts `json:"timeouts,omitempty"`
}

// Worker is a worker's FLOW_WORKERS entry.
type Worker struct {
	// ID identifies the worker among all others, alive or gone (see NewID): the last token of
	// its key.
	ID string `json:"id"`
	// Name is the worker's name for people: host and process.
	Name  string `json:"name"`
	Queue string `json:"queue"`
	// BuildID is the build of the worker's code; empty when it has none.
	BuildID string `json:"build_id,omitempty"`
	// Definitions are the workflow definitions the worker registers, sorted by name.
	Definitions []Registration `json:"definitions"`
	Host        string         `json:"host,omitempty"`
	PID         int            `json:"pid,omitempty"`
	StartedAt   time.Time      `json:"started_at"`
	// BeatAt is when the worker last wrote its entry, by its own clock.
	BeatAt time.Time `json:"beat_at"`
}

// Registers reports whether the worker registers workflow definition.
func (w Worker) Registers(definition string) bool {
	return slices.ContainsFunc(w.Definitions, func(r Registration) bool { return r.Definition == definition })
}

// registration returns the worker's registration of definition.
func (w Worker) registration(definition string) (Registration, bool) {
	i := slices.IndexFunc(w.Definitions, func(r Registration) bool { return r.Definition == definition })
	if i < 0 {
		return Registration{}, false
	}
	return w.Definitions[i], true
}

// Key returns the FLOW_WORKERS key of worker id on queue ("" is streams.DefaultQueue).
func Key(queue, id string) string {
	if queue == "" {
		queue = streams.DefaultQueue
	}
	return queue + "." + id
}

// NewID returns an ID for a worker on host with process ID pid that no other worker has: the
// host (with every character other than letters, digits, '-' and '_' replaced by '-'), the pid
// and 8 random hex digits, so that workers of one process differ too.
func NewID(host string, pid int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", token(host), pid, hex.EncodeToString(b[:]))
}

// token maps s to a key token: letters, digits, '-' and '_' only.
func token(s string) string {
	if s == "" {
		return "worker"
	}
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, s)
}

// validToken reports whether s is one non-empty key token.
func validToken(s string) bool { return s != "" && token(s) == s }

// Publisher keeps one worker's entry in FLOW_WORKERS alive until Stop.
type Publisher struct {
	kv     jetstream.KeyValue
	key    string
	every  time.Duration
	logger *slog.Logger

	mu    sync.Mutex
	entry Worker

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	stopErr  error
}

// beatTimeout bounds one write of an entry.
const beatTimeout = 5 * time.Second

// Publish writes worker w's entry, with BeatAt (and StartedAt, when zero) set to now, and
// rewrites it every third of the bucket's TTL until Stop; a failed write is logged and tried
// again at the next beat. It returns once the entry is written. w.ID and w.Queue must be single
// key tokens (letters, digits, '-' and '_'); w.Queue "" is streams.DefaultQueue. logger nil is
// slog.Default().
func Publish(ctx context.Context, js jetstream.JetStream, w Worker, logger *slog.Logger) (*Publisher, error) {
	if w.Queue == "" {
		w.Queue = streams.DefaultQueue
	}
	if !validToken(w.ID) || !validToken(w.Queue) {
		return nil, fmt.Errorf("liveness: worker ID %q and queue %q must be non-empty and hold only letters, digits, '-' and '_'", w.ID, w.Queue)
	}
	if logger == nil {
		logger = slog.Default()
	}
	kv, err := js.KeyValue(ctx, streams.WorkersBucket)
	if err != nil {
		return nil, fmt.Errorf("liveness: opening bucket %s: %w (streams.Ensure creates it)", streams.WorkersBucket, err)
	}
	ttl, err := bucketTTL(ctx, kv)
	if err != nil {
		return nil, err
	}
	w.Definitions = slices.Clone(w.Definitions)
	slices.SortFunc(w.Definitions, func(a, b Registration) int { return strings.Compare(a.Definition, b.Definition) })
	now := time.Now().UTC()
	if w.StartedAt.IsZero() {
		w.StartedAt = now
	}
	w.BeatAt = now
	p := &Publisher{kv: kv, key: Key(w.Queue, w.ID), every: ttl / 3, entry: w,
		logger: logger.With(slog.String("worker_id", w.ID)), stop: make(chan struct{}), done: make(chan struct{})}
	if err := p.put(ctx, w); err != nil {
		return nil, err
	}
	go p.beat()
	return p, nil
}

// bucketTTL returns the TTL of FLOW_WORKERS, or streams.DefaultWorkerTTL for a bucket without one.
func bucketTTL(ctx context.Context, kv jetstream.KeyValue) (time.Duration, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("liveness: reading bucket %s: %w", streams.WorkersBucket, err)
	}
	if ttl := st.TTL(); ttl > 0 {
		return ttl, nil
	}
	return streams.DefaultWorkerTTL, nil
}

func (p *Publisher) put(ctx context.Context, w Worker) error {
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if _, err := p.kv.Put(ctx, p.key, b); err != nil {
		return fmt.Errorf("liveness: writing the entry of worker %q: %w", w.ID, err)
	}
	return nil
}

func (p *Publisher) beat() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		p.entry.BeatAt = time.Now().UTC()
		w := p.entry
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), beatTimeout)
		err := p.put(ctx, w)
		cancel()
		if err != nil {
			p.logger.Warn("worker heartbeat failed; trying again at the next beat", slog.String("error", err.Error()),
				slog.Duration("in", p.every))
		}
	}
}

// Entry returns the entry as last written.
func (p *Publisher) Entry() Worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.entry
}

// Stop stops the heartbeat and deletes the entry, so that every View drops the worker at once.
// When the entry cannot be deleted it still expires with the bucket's TTL; the error says so.
// Stop is idempotent: later calls return the first one's error.
func (p *Publisher) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		close(p.stop)
		<-p.done
		if err := p.kv.Delete(ctx, p.key); err != nil {
			p.stopErr = fmt.Errorf("liveness: deleting the entry of worker %q: %w; it expires with the bucket's TTL", p.entry.ID, err)
		}
	})
	return p.stopErr
}

// ErrNoWorker is wrapped by View.Require's error when no live worker serves a definition. It
// is core.ErrNoWorker, which the SDK re-exports.
var ErrNoWorker = core.ErrNoWorker

// NoWorkerError is View.Require's error; it wraps ErrNoWorker.
type NoWorkerError struct {
	Queue, Definition string
	// LastSeen is the last heartbeat a View saw of a worker registering the definition; zero
	// when it saw none.
	LastSeen time.Time
	// RegisteredAt is when a worker last registered the definition on the queue
	// (FLOW_DEFINITIONS); zero when none ever did.
	RegisteredAt time.Time
	// Known are the definitions live workers serve on the queue, sorted.
	Known []string
	// At is when the View answered.
	At time.Time
}

func (e *NoWorkerError) Error() string {
	var seen string
	switch {
	case !e.LastSeen.IsZero():
		seen = "last worker seen " + Ago(e.At.Sub(e.LastSeen))
	case !e.RegisteredAt.IsZero():
		seen = "registered " + Ago(e.At.Sub(e.RegisteredAt)) + ", no live worker seen since"
	default:
		seen = "never registered"
	}
	known := "no live worker on this queue"
	if len(e.Known) > 0 {
		known = "known on this queue: " + strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("no live worker serves workflow %q on queue %q (%s; %s); start a worker that registers it (flow dev, or your own with pkg/flow/worker)",
		e.Definition, e.Queue, seen, known)
}

// Unwrap returns ErrNoWorker.
func (e *NoWorkerError) Unwrap() error { return ErrNoWorker }

// Ago says how long ago something d before now happened, roughly, for people: "just now",
// "3s ago", "4m ago", "2h ago", "5d ago".
func Ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}
