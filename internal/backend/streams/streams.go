// Package streams names Flow's JetStream streams, subjects, consumers and key-value buckets, and
// creates or updates them idempotently. Every Flow process calls Ensure at start; a changed
// setting (replicas) is applied by updating in place.
package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/core"
)

// Streams and buckets.
const (
	// History holds every run's events on flow.history.<run>, one message per commit, when the
	// history has one partition; partition p of several is History_<p> (Layout).
	History = "FLOW_HISTORY"
	// Tasks is the work queue of resume tasks on flow.task.<queue>.<run> (and, for runs pinned
	// to a build, flow.task.<queue>.b.<build token>.<run>), deduplicated by Nats-Msg-Id
	// "<run>:<seq>".
	Tasks = "FLOW_TASKS"
	// DeadLetter keeps the inputs the ingress rejected that were published without a reply
	// subject, on flow.deadletter.ingress.<kind>, with the reason in their headers, for 7 days.
	DeadLetter = "FLOW_DEADLETTER"
	// TimersBucket holds one entry per pending timer: key "<run>.<timer key>", value a JSON
	// core.Timer. Its one writer is the history service, which registers a commit's timers and
	// deletes the entries the commit made moot (a fired timer's among them) as it follows the
	// history; the scheduler watches it and fires the timers.
	TimersBucket = "FLOW_TIMERS"
	// HooksBucket maps hook tokens to their run and hook (jshost.HookRoute): created only for a
	// token that is free, or released by a run that ended. The history service is its one
	// writer; workers ask it to claim tokens (internal/api/derived.go).
	HooksBucket = "FLOW_HOOKS"
	// RunsBucket indexes runs: key run ID, value a JSON core.Summary. The history service writes
	// it.
	RunsBucket = "FLOW_RUNS"
	// DefinitionsBucket records the latest registration of each definition: key
	// "<queue>.<definition>", value a JSON definitions.Definition (internal/definitions). Workers write it at start and never remove
	// it; which workers are alive is in WorkersBucket.
	DefinitionsBucket = "FLOW_DEFINITIONS"
	// LeasesBucket holds leader leases (the scheduler's), expiring after Config.LeaseTTL.
	LeasesBucket = "FLOW_LEASES"
	// ParkedBucket holds the runs that no worker of their queue can drive now: key run ID, value
	// a JSON parked.Run (internal/parked). The history service is its one writer: it writes an entry when a worker
	// asks it to park a run (internal/api/derived.go), dispatches the runs again when a worker
	// that can registers, and deletes the entries.
	ParkedBucket = "FLOW_PARKED"
	// WorkersBucket holds one entry per live worker: key "<queue>.<worker id>", value a JSON
	// liveness.Worker. Each worker writes its own entry at start and every Config.WorkerTTL/3,
	// and deletes it when it stops; the entry of a worker that died expires after WorkerTTL.
	WorkersBucket = "FLOW_WORKERS"
	// DamagedBucket lists runs whose history was found damaged: key run ID, value a JSON
	// jsstore.Damaged (internal/store/jsstore). The history service writes it; every store refuses to serve those runs.
	DamagedBucket = "FLOW_DAMAGED"
	// StartKeysBucket maps start keys to the run started under them: key
	// "dedup.<definition>.<digest>" or "debounce.<definition>.<digest>", value a JSON
	// engine.KeyEntry. Created only where none is; a dedup entry expires after its window
	// (per-key TTL). See docs/start-policies.md.
	StartKeysBucket = "FLOW_START_KEYS"
	// LimitsBucket holds the flow-control state of the admission controller (internal/limits),
	// its one writer: key "g.<group token>", the concurrency slots and rate log of a
	// flow-control group. Changed only by compare-and-set.
	LimitsBucket = "FLOW_LIMITS"
	// StepLimitsBucket holds the state of step limits (flow.LimitStep), written by the workers
	// that take and release its slots: key "s.<step token>", the attempts holding slots (leases)
	// and the rate log of a limited step name. Changed only by compare-and-set.
	StepLimitsBucket = "FLOW_STEP_LIMITS"
	// QueueBucket lists the runs waiting for admission under flow control: key run ID, value a
	// JSON limits.Waiting. The history service writes an entry when a run under flow control
	// starts and deletes it once the run is admitted or ended; the admission controller (in the
	// scheduler service) watches it.
	QueueBucket = "FLOW_QUEUE"
	// HeartbeatsBucket holds the latest heartbeat of each step that has one: key
	// "<run>.<step>", value a JSON heartbeat entry (the attempt, its start, its details). Workers
	// write it as attempts start and beat; the scheduler's watcher follows it and fails an
	// attempt whose heartbeat or start-to-close deadline passed; the next attempt reads the
	// details. Entries expire after Config.HeartbeatTTL. See docs/timeouts.md.
	HeartbeatsBucket = "FLOW_HEARTBEATS"
	// SecretsBucket holds the input signing key (internal/inputsig): key "inputs", the HMAC key
	// the input writers (the history service, the ingress, the scheduler) sign input events with
	// and the history stream sequence from which they must be signed. Only those roles may read
	// it; the first of them that needs the key creates it.
	SecretsBucket = "FLOW_SECRETS"
	// ArchiveBucket is the Object Store of archived histories: object name run ID, the run's
	// whole history as one JSON array of envelopes, written by the retention sweeper before it
	// deletes the run from History (internal/archive, docs/retention.md).
	ArchiveBucket = "FLOW_ARCHIVE"
	// RetentionLease is the retention sweeper's key in LeasesBucket: the history service replica
	// that holds it deletes the runs past their retention.
	RetentionLease = "retention"
	// ReconcileLease is the history service's reconciler's key in LeasesBucket: the replica that
	// holds it recomputes the state the service derives from history and repairs drift.
	ReconcileLease = "reconcile"
	// PayloadsLease is the history service's payload collector's key in LeasesBucket: the
	// replica that holds it deletes the offloaded payloads no retained history refers to.
	PayloadsLease = "payloads"
	// SchedulesBucket holds the schedules (internal/schedule): key the schedule's name, value a
	// JSON schedule.Schedule, its spec and its state. Its one writer is the scheduler's schedule
	// runner: it advances their state as it fires them, and creates, changes and deletes them
	// for the ingress, which forwards its callers' changes (and only reads the bucket); always by
	// compare-and-set. See docs/schedules.md.
	SchedulesBucket = "FLOW_SCHEDULES"
	// BatchesBucket holds the batch jobs (internal/batch): key "job.<id>", a job's spec, state
	// and progress, changed only by compare-and-set; key "targets.<id>.<n>", the n-th chunk of
	// the run IDs its filter selected, written before any of them is touched. Its one writer is
	// the scheduler's batch executor, which also creates and stops jobs for the ingress (which
	// only reads the bucket). See docs/batch.md.
	BatchesBucket = "FLOW_BATCHES"
	// PausesBucket holds the paused definitions and queues: key "definition.<name>" or
	// "queue.<name>", value a JSON pauses.Pause (internal/pauses). The ingress writes and
	// deletes entries; workers and the history service watch it. See docs/pause.md.
	PausesBucket = "FLOW_PAUSES"
	// PayloadsBucket is the object store of offloaded payloads, each named by the hex SHA-256
	// of its bytes (internal/payload, docs/large-payloads.md).
	PayloadsBucket = "FLOW_PAYLOADS"
	// CheckpointsBucket is the object store of snapshot checkpoints: one object per run, named
	// by its run ID and replaced by the next (internal/engine/checkpoint.go).
	CheckpointsBucket = "FLOW_CHECKPOINTS"
	// HistoryConsumer is the history service's durable consumer of each history stream.
	HistoryConsumer = "history"
)

// DefaultQueue is the task queue of runs started without one (core.DefaultQueue).
const DefaultQueue = core.DefaultQueue

const (
	historyPrefix = "flow.history."
	taskPrefix    = "flow.task."
)

// TaskSubject returns the subject of resume tasks for run runID on queue: flow.task.<queue>.<run>
// for a run any build may drive, flow.task.<queue>.b.<build token>.<run> for a run pinned to
// build (see BuildToken), which only workers of that build consume.
func TaskSubject(queue, build, runID string) string {
	if queue == "" {
		queue = DefaultQueue
	}
	if build == "" {
		return taskPrefix + queue + "." + runID
	}
	return taskPrefix + queue + ".b." + BuildToken(build) + "." + runID
}

// BuildToken returns build ID id as a subject token and consumer name part: id itself when it
// holds only letters, digits, '-' and '_', else "~" and the first 16 hex digits of its SHA-256
// (a build ID such as "v1.2.3" cannot be a token).
func BuildToken(id string) string { return core.BuildToken(id) }

// RunOfTask returns the run ID of a task subject.
func RunOfTask(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, taskPrefix)
	if !ok {
		return "", fmt.Errorf("subject %q is not a task subject", subject)
	}
	tokens := strings.Split(rest, ".")
	switch {
	case len(tokens) == 2 && tokens[1] != "":
		return tokens[1], nil
	case len(tokens) == 4 && tokens[1] == "b" && tokens[3] != "":
		return tokens[3], nil
	}
	return "", fmt.Errorf("subject %q names no run", subject)
}

// Config sizes Flow's streams and buckets. The zero value suits a single server. Ensure applies a
// zero field only when it creates a stream or bucket; it never changes an existing one's setting
// back to a default, so processes started without configuration leave an operator's choices alone.
type Config struct {
	// Replicas of every stream and bucket: 1 on a single server, 3 in a cluster. Defaults to 1.
	Replicas int `envconfig:"REPLICAS"`
	// Partitions is the number of streams run histories are spread over (Layout), each with
	// its own leader: on a cluster, more partitions spread the appends over more nodes. Used
	// only when the history streams are created; afterwards it may only name the existing
	// count. Defaults to the existing count, or 1.
	Partitions int `envconfig:"PARTITIONS"`
	// DuplicateWindow is how long appends and tasks are deduplicated by message ID. Defaults to
	// 2 minutes.
	DuplicateWindow time.Duration `envconfig:"DUPLICATE_WINDOW"`
	// LeaseTTL is how long a leader lease lives without renewal. Defaults to 10 seconds.
	LeaseTTL time.Duration `envconfig:"LEASE_TTL"`
	// WorkerTTL is how long a worker's FLOW_WORKERS entry lives without a heartbeat: a worker
	// that dies without stopping counts as alive this long. Workers beat every WorkerTTL/3.
	// Defaults to 15 seconds; at least 1 second.
	WorkerTTL time.Duration `envconfig:"WORKER_TTL"`
	// HeartbeatTTL is how long a step's FLOW_HEARTBEATS entry lives after its last write: a
	// retry that starts later than this after the previous attempt's last heartbeat reads no
	// details. Defaults to 7 days.
	HeartbeatTTL time.Duration `envconfig:"HEARTBEAT_TTL"`
}

func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.WorkerTTL == 0 {
		c.WorkerTTL = DefaultWorkerTTL
	}
	if c.HeartbeatTTL == 0 {
		c.HeartbeatTTL = 7 * 24 * time.Hour
	}
	return c
}

// DefaultWorkerTTL is Config.WorkerTTL's default.
const DefaultWorkerTTL = 15 * time.Second

// ErrConfig is wrapped by Ensure's errors about a Config no server could accept.
var ErrConfig = errors.New("streams")

// Ensure creates Flow's streams and buckets that do not exist, and updates existing ones to the
// fields of cfg that are set. What it creates or updates allows no Nats-Rollup header where Flow
// needs none (rollup.go). It updates no stream for that setting alone, so that a process whose
// NATS user may not update streams (every service but the history service) also starts against
// streams that still allow rollups: Provision turns them off.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	return ensure(ctx, js, cfg, false)
}

// Provision is Ensure for the process that provisions Flow's streams (the history service, the
// one whose NATS user may update them): it also turns rollups off on every stream that allows
// them though Flow needs none (rollup.go), streams created before Flow turned them off included.
// Calling it again changes nothing.
func Provision(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	return ensure(ctx, js, cfg, true)
}

func ensure(ctx context.Context, js jetstream.JetStream, cfg Config, provision bool) error {
	if cfg.Replicas < 0 || cfg.Replicas > 5 {
		return fmt.Errorf("%w: Replicas must be between 1 and 5, got %d", ErrConfig, cfg.Replicas)
	}
	if cfg.WorkerTTL != 0 && cfg.WorkerTTL < time.Second {
		return fmt.Errorf("%w: WorkerTTL must be at least 1s, got %s", ErrConfig, cfg.WorkerTTL)
	}
	if cfg.Partitions < 0 || cfg.Partitions > MaxPartitions {
		return fmt.Errorf("%w: Partitions must be between 1 and %d, got %d", ErrConfig, MaxPartitions, cfg.Partitions)
	}
	d := cfg.withDefaults()
	layout, err := layoutFor(ctx, js, cfg)
	if err != nil {
		return err
	}
	for _, sc := range layout.streamConfigs(d) {
		if err := ensureStream(ctx, js, sc, cfg); err != nil {
			// Another process may have created another layout meanwhile: say so if it did.
			if _, lerr := layoutFor(ctx, js, cfg); errors.Is(lerr, ErrConfig) {
				return lerr
			}
			return err
		}
	}
	var seal []string // the streams to turn rollups off on
	for _, sc := range []jetstream.StreamConfig{
		{
			Name: Tasks, Subjects: []string{taskPrefix + ">"}, Storage: jetstream.FileStorage,
			Retention: jetstream.WorkQueuePolicy, Replicas: d.Replicas, Duplicates: d.DuplicateWindow,
			Description: "Flow resume tasks on flow.task.<queue>.<run>",
		},
		{
			Name: DeadLetter, Subjects: []string{"flow.deadletter.>"}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, Replicas: d.Replicas, MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30,
			Description: "Flow inputs the ingress rejected, with the reason in Flow-Error-Code and Flow-Error-Message",
		},
	} {
		if err := ensureStream(ctx, js, sc, cfg); err != nil {
			return err
		}
	}
	for _, kc := range []jetstream.KeyValueConfig{
		{Bucket: TimersBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow pending timers"},
		{Bucket: HooksBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow hook tokens"},
		{Bucket: RunsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow runs index"},
		{Bucket: DefinitionsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow workflow definitions by queue"},
		{Bucket: LeasesBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, TTL: d.LeaseTTL, Description: "Flow leader leases"},
		{Bucket: ParkedBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow runs no worker can drive now"},
		{Bucket: DamagedBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow runs whose history is damaged"},
		{Bucket: LimitsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, History: 1, Description: "Flow flow-control slots and rate windows"},
		{Bucket: StepLimitsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, History: 1, Description: "Flow step limits: slots and rate windows of limited steps"},
		{Bucket: QueueBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow runs waiting for admission under flow control"},
		{Bucket: SchedulesBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow schedules and their state"},
		{Bucket: PausesBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow paused definitions and queues"},
		// An expired entry leaves a marker, so that watchers learn at once that its worker is gone.
		{Bucket: WorkersBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, TTL: d.WorkerTTL, LimitMarkerTTL: d.WorkerTTL,
			Description: "Flow live workers and the definitions they register"},
		// Per-key TTLs (dedup windows) need limit markers.
		{Bucket: StartKeysBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, LimitMarkerTTL: time.Minute,
			Description: "Flow start dedup and debounce keys"},
		{Bucket: HeartbeatsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, History: 1, TTL: d.HeartbeatTTL,
			Description: "Flow step heartbeats: the latest of each step's attempt"},
		{Bucket: BatchesBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, History: 1, Description: "Flow batch jobs and their target runs"},
		{Bucket: SecretsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, History: 1, Description: "Flow input signing key, readable by the input writers only"},
	} {
		wrote, rollups, err := ensureBucket(ctx, js, kc, cfg)
		if err != nil {
			return err
		}
		if rollups && (wrote || provision) {
			seal = append(seal, "KV_"+kc.Bucket)
		}
	}
	for _, oc := range []jetstream.ObjectStoreConfig{
		{Bucket: ArchiveBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Compression: true,
			Description: "Flow archived histories of runs deleted after their retention period"},
		{Bucket: PayloadsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow payloads offloaded from histories, by SHA-256"},
		{Bucket: CheckpointsBucket, Storage: jetstream.FileStorage, Replicas: d.Replicas, Description: "Flow snapshot checkpoints, one per run"},
	} {
		wrote, rollups, err := ensureObjectStore(ctx, js, oc, cfg)
		if err != nil {
			return err
		}
		if rollups && (wrote || provision) && !RollupsNeeded[oc.Bucket] {
			seal = append(seal, "OBJ_"+oc.Bucket)
		}
	}
	// After every creation (which may return before its stream exists, natstest's
	// ensureConcurrently). A bucket updated above allowed rollups until now: nats.go's
	// UpdateKeyValue sets a bucket's whole configuration, rollups allowed.
	for _, name := range seal {
		if err := noRollups(ctx, js, name); err != nil {
			return err
		}
	}
	return nil
}

// ensureObjectStore creates an Object Store bucket that does not exist, and updates an existing
// one's replicas to cfg's when set. It reports whether it created (or found created meanwhile) or
// updated the bucket's stream, and whether the stream may allow rollups now (nats.go creates
// object stores allowing them).
func ensureObjectStore(ctx context.Context, js jetstream.JetStream, want jetstream.ObjectStoreConfig, set Config) (wrote, rollups bool, err error) {
	st, err := js.Stream(ctx, "OBJ_"+want.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateObjectStore(ctx, want); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return false, false, fmt.Errorf("creating object store %s: %w", want.Bucket, err)
		}
		return true, true, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("reading object store %s: %w", want.Bucket, err)
	}
	cur := st.CachedInfo().Config
	if set.Replicas == 0 || cur.Replicas == set.Replicas {
		return false, cur.AllowRollup, nil
	}
	cur.Replicas = set.Replicas
	if _, err := js.UpdateStream(ctx, cur); err != nil {
		return false, false, fmt.Errorf("updating object store %s: %w", want.Bucket, err)
	}
	return true, cur.AllowRollup, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, set Config) error {
	st, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("creating stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", want.Name, err)
	}
	cur := st.CachedInfo().Config
	changed := false
	if set.Replicas != 0 && cur.Replicas != set.Replicas {
		cur.Replicas, changed = set.Replicas, true
	}
	if set.DuplicateWindow != 0 && cur.Duplicates != set.DuplicateWindow {
		cur.Duplicates, changed = set.DuplicateWindow, true
	}
	if !changed {
		return nil
	}
	if _, err := js.UpdateStream(ctx, cur); err != nil {
		return fmt.Errorf("updating stream %s: %w", want.Name, err)
	}
	return nil
}

// ensureBucket creates a bucket that does not exist, and updates an existing one to the fields of
// set that are set. It reports whether it created (or found created meanwhile) or updated the
// bucket's stream, and whether the stream may allow rollups now (nats.go's CreateKeyValue and
// UpdateKeyValue allow them). AllowRollup is not among the settings it compares.
func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, set Config) (wrote, rollups bool, err error) {
	st, err := js.Stream(ctx, "KV_"+want.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err := js.CreateKeyValue(ctx, want)
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
			// A server older than 2.11: no expiry markers; watchers time entries out themselves.
			want.LimitMarkerTTL = 0
			_, err = js.CreateKeyValue(ctx, want)
		}
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return false, false, fmt.Errorf("creating bucket %s: %w", want.Bucket, err)
		}
		return true, true, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("reading bucket %s: %w", want.Bucket, err)
	}
	cur := st.CachedInfo().Config
	update := want
	update.Replicas, update.TTL = cur.Replicas, cur.MaxAge
	if set.Replicas != 0 {
		update.Replicas = set.Replicas
	}
	if want.Bucket == LeasesBucket && set.LeaseTTL != 0 {
		update.TTL = set.LeaseTTL
	}
	if want.Bucket == HeartbeatsBucket && set.HeartbeatTTL != 0 {
		update.TTL = set.HeartbeatTTL
	}
	if want.Bucket == WorkersBucket {
		update.LimitMarkerTTL = cur.SubjectDeleteMarkerTTL
		if set.WorkerTTL != 0 {
			update.TTL = set.WorkerTTL
			if cur.SubjectDeleteMarkerTTL != 0 { // a bucket made without markers stays so
				update.LimitMarkerTTL = set.WorkerTTL
			}
		}
	}
	if update.Replicas == cur.Replicas && update.TTL == cur.MaxAge && update.LimitMarkerTTL == cur.SubjectDeleteMarkerTTL {
		return false, cur.AllowRollup, nil
	}
	if _, err := js.UpdateKeyValue(ctx, update); err != nil {
		return false, false, fmt.Errorf("updating bucket %s: %w", want.Bucket, err)
	}
	return true, true, nil
}

// ErrNotProvisioned is returned by Check when Flow's streams do not exist.
var ErrNotProvisioned = errors.New("flow: Flow's streams do not exist on this NATS server")

// Check reports whether Flow's history streams exist, with an error that says what to do.
func Check(ctx context.Context, js jetstream.JetStream) error {
	_, err := Load(ctx, js)
	return err
}

// TaskConsumer creates or updates the durable pull consumer of queue's tasks for runs of build
// ("" for runs any build may drive), shared by the queue's workers (of that build). A task not
// acknowledged within ackWait is redelivered. The consumers of one queue do not overlap: each
// task reaches the workers that can drive its run, and a run pinned to a build no worker runs
// waits for one without holding anyone else's tasks.
func TaskConsumer(ctx context.Context, js jetstream.JetStream, queue, build string, ackWait time.Duration, maxAckPending int) (jetstream.Consumer, error) {
	if queue == "" {
		queue = DefaultQueue
	}
	name, filter, desc := "worker-"+queue, taskPrefix+queue+".*", "Flow workers of queue "+queue
	if build != "" {
		name, filter = "worker-"+queue+"-b-"+BuildToken(build), taskPrefix+queue+".b."+BuildToken(build)+".*"
		desc += ", runs pinned to build " + build
	}
	c, err := js.CreateOrUpdateConsumer(ctx, Tasks, jetstream.ConsumerConfig{
		Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: ackWait, MaxDeliver: -1, MaxAckPending: maxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
		Description: desc,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the task consumer of queue %q: %w", queue, err)
	}
	return c, nil
}
