package natsperm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsconn"
)

// The subjects below are what the services' code uses, traced through nats.go's jetstream
// package (v1.55): a stream's configuration is read with STREAM.INFO and written with
// STREAM.CREATE and STREAM.UPDATE; messages are read with DIRECT.GET (FLOW_HISTORY and every
// bucket allow direct reads) and STREAM.MSG.GET (a read at the stream leader); pull consumers are
// created with CONSUMER.CREATE, read with CONSUMER.INFO, pulled with CONSUMER.MSG.NEXT and
// acknowledged on $JS.ACK; a bucket's entries are written by publishing to $KV.<bucket>.<key>,
// and watched with an ordered push consumer (CONSUMER.CREATE on KV_<bucket>, flow control replies
// on $JS.FC). Replies of JetStream and of the services arrive on the requester's inbox: each role
// dials with its own inbox prefix, natsconn.InboxPrefix(role) ("_INBOX.<role>"), and subscribes
// to it alone.
//
// No role has nats-server's allow_responses: it would let a role publish once to the reply
// subject of any message it receives, and a role that subscribes to a subject it publishes to
// (flow.history.>) receives its own messages, with a reply subject of its choosing such as
// $KV.FLOW_HOOKS.<token>: a write, or a deletion, of any stream's subject. The roles that answer
// requests may publish to inboxes instead ("_INBOX.>"), which no stream stores.

const jsAPI = "$JS.API."

// allStreams are the streams streams.Ensure creates, buckets included (KV_<bucket>), object
// stores last (OBJ_<bucket>).
var allStreams = append(append([]string{streams.History, streams.Tasks, streams.DeadLetter}, kvStreams(allBuckets)...),
	"OBJ_"+streams.ArchiveBucket, "OBJ_"+streams.PayloadsBucket, "OBJ_"+streams.CheckpointsBucket)

// GrantedPartitions is the most history partitions (streams.Layout) the roles grant access to:
// besides FLOW_HISTORY, the streams FLOW_HISTORY_0 to FLOW_HISTORY_8 of a history spread over
// up to 9 streams. Grants for streams that do not exist allow nothing.
const GrantedPartitions = 9

// partitionStreams are the history streams of a partitioned history the roles are granted.
var partitionStreams = streams.NewLayout(GrantedPartitions).Streams()

// historyStreams are every history stream the roles are granted: FLOW_HISTORY first.
var historyStreams = append([]string{streams.History}, partitionStreams...)

// allBuckets are the buckets streams.Ensure creates.
var allBuckets = []string{streams.TimersBucket, streams.HooksBucket, streams.RunsBucket, streams.DefinitionsBucket,
	streams.LeasesBucket, streams.ParkedBucket, streams.DamagedBucket, streams.WorkersBucket,
	streams.StartKeysBucket, streams.LimitsBucket, streams.StepLimitsBucket, streams.QueueBucket, streams.HeartbeatsBucket, streams.SchedulesBucket, streams.BatchesBucket,
	streams.PausesBucket, streams.SecretsBucket}

func kvStreams(buckets []string) []string {
	out := make([]string, len(buckets))
	for i, b := range buckets {
		out[i] = "KV_" + b
	}
	return out
}

// grants collects a role's subjects without duplicates, in the order they are granted, and what
// they let it do with each stream and bucket.
type grants struct {
	pub, sub  []string
	provision bool
	access    []Access
	inbox     string
	answers   bool
}

// partitionsLabel names the partitioned history streams together in the roles' access lists.
var partitionsLabel = fmt.Sprintf("%s to %s", partitionStreams[0], partitionStreams[len(partitionStreams)-1])

// can records that the role may do verb with stream or bucket name.
func (g *grants) can(name, verb string) {
	if slices.Contains(partitionStreams, name) {
		name = partitionsLabel
	}
	for i := range g.access {
		if g.access[i].Name == name {
			if !slices.Contains(g.access[i].Verbs, verb) {
				g.access[i].Verbs = append(g.access[i].Verbs, verb)
			}
			return
		}
	}
	g.access = append(g.access, Access{Name: name, Verbs: []string{verb}})
}

func (g *grants) publish(subjects ...string) {
	for _, s := range subjects {
		if !slices.Contains(g.pub, s) {
			g.pub = append(g.pub, s)
		}
	}
}

func (g *grants) subscribe(subjects ...string) {
	for _, s := range subjects {
		if !slices.Contains(g.sub, s) {
			g.sub = append(g.sub, s)
		}
	}
}

// replies lets role receive replies, of JetStream's API and of the services it asks, on its own
// inboxes only (natsconn.InboxPrefix).
func (g *grants) replies(role string) {
	g.inbox = natsconn.InboxPrefix(role)
	g.subscribe(g.inbox + ".>")
}

// answer lets the role answer the requests it receives: it publishes to the requesters' inboxes,
// whatever their prefix, and to no other reply subject (see the top of this file).
func (g *grants) answer() {
	g.answers = true
	g.publish("_INBOX.>")
}

// ensure is what streams.Ensure needs when the streams exist: their configuration.
func (g *grants) ensure() {
	for _, s := range append(slices.Clone(allStreams), partitionStreams...) {
		g.publish(jsAPI + "STREAM.INFO." + s)
	}
}

// provisions is what streams.Ensure needs to create the streams and buckets, or update them.
func (g *grants) provisions() {
	g.provision = true
	g.ensure()
	g.publish(jsAPI + "INFO") // creating a bucket reads the account's limits
	for _, s := range append(slices.Clone(allStreams), partitionStreams...) {
		g.publish(jsAPI+"STREAM.CREATE."+s, jsAPI+"STREAM.UPDATE."+s)
	}
}

// service returns the grants every service starts from: it receives replies on its own inboxes
// and answers requests, reads the streams' configuration (the history service alone creates and
// updates them) and hosts the engine.
func service(role string) *grants {
	var g grants
	g.replies(role)
	g.answer()
	if role == History {
		g.provisions()
	} else {
		g.ensure()
	}
	g.engine()
	return &g
}

// readStream reads messages of stream: direct reads (one message, or a batch), and reads at the
// stream leader.
func (g *grants) readStream(stream string) {
	g.can(strings.TrimPrefix(stream, "KV_"), "read")
	g.publish(jsAPI+"STREAM.INFO."+stream, jsAPI+"DIRECT.GET."+stream, jsAPI+"DIRECT.GET."+stream+".>",
		jsAPI+"STREAM.MSG.GET."+stream)
}

// consume creates, reads and pulls from the durable consumers of stream named consumer (a
// wildcard for several, which names describes), and acknowledges their messages.
func (g *grants) consume(stream, consumer, names string) {
	g.can(stream, "consume ("+names+")")
	g.publish(jsAPI+"CONSUMER.CREATE."+stream+"."+consumer, jsAPI+"CONSUMER.CREATE."+stream+"."+consumer+".>",
		jsAPI+"CONSUMER.INFO."+stream+"."+consumer, jsAPI+"CONSUMER.MSG.NEXT."+stream+"."+consumer,
		"$JS.ACK."+stream+"."+consumer+".>")
}

// kvRead opens bucket and reads its entries.
func (g *grants) kvRead(bucket string) { g.readStream("KV_" + bucket) }

// kvWrite opens bucket, reads and writes its entries (put, create, update, delete).
func (g *grants) kvWrite(bucket string) {
	g.kvRead(bucket)
	g.can(bucket, "write")
	g.publish("$KV." + bucket + ".>")
}

// kvWatch opens bucket and watches its entries with ordered consumers: created again under a new
// name after a gap, deleted when the watch stops, and answering the stream's flow control.
func (g *grants) kvWatch(bucket string) {
	g.kvRead(bucket)
	g.can(bucket, "watch")
	s := "KV_" + bucket
	g.publish(jsAPI+"CONSUMER.CREATE."+s+".*", jsAPI+"CONSUMER.CREATE."+s+".*.>", jsAPI+"CONSUMER.DELETE."+s+".*",
		"$JS.FC."+s+".>")
}

// objRead opens Object Store bucket and reads its objects: the info by a direct get of the
// object's last meta message, the chunks with ordered consumers.
func (g *grants) objRead(bucket string) {
	s := "OBJ_" + bucket
	g.readStream(s)
	g.publish(jsAPI+"CONSUMER.CREATE."+s+".*", jsAPI+"CONSUMER.CREATE."+s+".*.>", jsAPI+"CONSUMER.DELETE."+s+".*",
		"$JS.FC."+s+".>")
}

// objWrite opens Object Store bucket, writes objects (chunks and metadata) and reads them back
// with ordered consumers. It may not purge: the payload store writes each object once under its
// digest, and never overwrites or deletes one (internal/payload/objstore).
func (g *grants) objWrite(bucket string) {
	s := "OBJ_" + bucket
	g.readStream(s)
	g.can(s, "write")
	g.publish("$O."+bucket+".>", jsAPI+"CONSUMER.CREATE."+s+".*", jsAPI+"CONSUMER.CREATE."+s+".*.>",
		jsAPI+"CONSUMER.DELETE."+s+".*", "$JS.FC."+s+".>")
}

// objOwn is objWrite for the one owner of bucket, which also deletes objects and overwrites
// them: it purges their chunks (and the collector's deletion records).
func (g *grants) objOwn(bucket string) {
	g.objWrite(bucket)
	s := "OBJ_" + bucket
	g.can(s, "purge (the chunks of deleted, replaced and orphaned objects)")
	g.publish(jsAPI + "STREAM.PURGE." + s)
}

// engine is what every process hosting the engine (jsstore, jshost) needs: it reads run
// histories and appends to them, dispatches resume tasks, and learns which runs are damaged.
// Timers and hook tokens are granted to the roles that write them.
func (g *grants) engine() {
	for _, s := range historyStreams {
		g.readStream(s)
		g.append(s, "flow.history.>")
	}
	g.append(streams.Tasks, "flow.task.>")
	g.kvWatch(streams.DamagedBucket)
}

// append lets the role publish to subject, which stream stores.
func (g *grants) append(stream, subject string) {
	g.can(stream, "append")
	g.publish(subject)
}

// follow lets the role follow runs' commits as they are published (jsstore's Follow).
func (g *grants) follow() { g.subscribe("flow.history.>") }

// liveness is what liveness.Watch needs: the live workers and the definitions they register.
func (g *grants) liveness() {
	g.kvWatch(streams.WorkersBucket)
	g.kvWatch(streams.DefinitionsBucket)
}

func (g grants) role(name, who string) Role {
	r := newRole(name, who)
	r.Publish, r.Subscribe, r.InboxPrefix, r.Answers = g.pub, g.sub, g.inbox, g.answers
	r.Provisions, r.JetStream = g.provision, g.access
	return r
}

// historyRole: the history service provisions the streams, consumes FLOW_HISTORY (durable
// consumer "history"), keeps the runs index, the timers, the hook token routes, the parked runs
// and the damaged runs, dispatches parked runs again, publishes the event feed, answers queries
// and the workers' claims and parks (a micro service, with $SRV discovery). The web UI's actions
// go to the ingress's HTTP API with the caller's token, not over NATS as this role.
func historyRole() Role {
	g := service(History)
	g.follow()
	for _, s := range historyStreams {
		g.consume(s, streams.HistoryConsumer, "`"+streams.HistoryConsumer+"`")
	}
	g.kvWrite(streams.TimersBucket) // the timer index's one writer: it registers the timers of each commit, and deletes moot ones
	g.kvWrite(streams.HooksBucket)  // the hook routes' one writer: it claims the tokens workers ask for, moves them to reset runs, releases ended runs' tokens
	g.kvWatch(streams.HooksBucket)  // and its reconciler reads every route
	g.kvWrite(streams.RunsBucket)
	g.kvWatch(streams.RunsBucket)
	g.kvWrite(streams.ParkedBucket) // the parked runs' one writer: it parks the runs workers ask it to, and deletes them when it dispatches them
	g.kvWatch(streams.ParkedBucket)
	g.kvWrite(streams.DamagedBucket)
	// It creates the input signing key, signs the inputs it writes and checks every commit's
	// (internal/inputsig).
	g.kvWrite(streams.SecretsBucket)
	g.kvWrite(streams.StartKeysBucket) // the start keys' one writer: it claims them for the ingress, releases them, and repairs them
	g.kvWatch(streams.StartKeysBucket) // its reconciler lists them
	g.kvWrite(streams.QueueBucket)     // it queues runs under flow control for admission
	g.kvWatch(streams.QueueBucket)     // its reconciler lists the queue
	g.kvWatch(streams.TimersBucket)    // and the timer index
	g.kvRead(streams.StepLimitsBucket) // it shows the attempts that wait for a step limit's slot
	g.kvWatch(streams.PausesBucket)    // it dispatches runs parked by a definition or queue pause once it is gone
	g.liveness()
	// The retention sweeper: its own lease (not the scheduler's), the archive, and the purge of
	// the histories of runs past their retention (docs/retention.md).
	g.kvRead(streams.LeasesBucket)
	g.can(streams.LeasesBucket, "write (keys "+streams.RetentionLease+", "+streams.ReconcileLease+", "+streams.PayloadsLease+")")
	g.publish("$KV."+streams.LeasesBucket+"."+streams.RetentionLease, "$KV."+streams.LeasesBucket+"."+streams.ReconcileLease,
		"$KV."+streams.LeasesBucket+"."+streams.PayloadsLease)
	g.objOwn(streams.ArchiveBucket)
	g.objOwn(streams.CheckpointsBucket) // the checkpoints' one writer: it writes them as it follows the history, deletes a deleted run's, repairs them
	// The payload collector: it reads the payloads a deleted run's archive takes, and deletes
	// the objects no retained history refers to (a conditional deletion record on the object's
	// metadata subject, then purges of its chunks and of the record; docs/large-payloads.md),
	// the chunks that writers orphaned (an upload that failed, or lost a race), and the metadata
	// messages that writes and touches superseded (no writer rolls them up: the stream refuses
	// the Nats-Rollup header, internal/backend/streams).
	g.objOwn(streams.PayloadsBucket)
	for _, s := range historyStreams {
		g.can(s, "purge (one run's subject)")
		g.publish(jsAPI + "STREAM.PURGE." + s)
	}
	for _, s := range partitionStreams { // the reconciler spreads their leaders over the servers
		g.can(s, "move its leader")
		g.publish(jsAPI + "STREAM.LEADER.STEPDOWN." + s)
	}
	g.publish(api.FeedPrefix + ">")
	g.publish(api.BatchPrefix + ">") // the web UI reads the batch jobs through the ingress
	g.subscribe("flow.api.>", api.FeedPrefix+">")
	g.subscribe(api.SubjectHookClaim, api.SubjectPark) // the workers' claims of hook tokens and parks of runs
	g.subscribe(api.SubjectStartKeysPrefix + "*")      // the ingress's claims of start keys
	// The endpoints that reveal a run's secrets (docs/operations.md#secrets): the history service
	// answers them, and no role may ask them.
	g.subscribe(api.SubjectSecretsGet, api.SubjectSecretsHistory)
	g.subscribe("$SRV.*", "$SRV.*.flow-history", "$SRV.*.flow-history.*")
	return g.role(History, "the history service (`flowd history`)")
}

// schedulerRole: the scheduler holds the lease, watches the timers and fires them; it holds the
// admission lease too, and admits the runs under flow control; it fires the schedules and runs
// the batch jobs, and answers the changes of both that the ingress forwards.
func schedulerRole() Role {
	g := service(Scheduler)
	g.follow() // it learns of each timer from its commit, before the history service writes its entry
	// It signs the inputs of its batch jobs, schedules and admission (internal/inputsig).
	g.kvRead(streams.SecretsBucket)
	g.kvWrite(streams.LeasesBucket)
	g.kvWatch(streams.TimersBucket) // it fires the timers; the history service deletes their entries
	// It hands the waits and retry backoffs that fall due to their runs' workers, and fires one
	// itself only when no task of its run waits in the work queue.
	g.readStream(streams.Tasks)
	g.kvWatch(streams.QueueBucket)  // the admission controller follows the runs waiting for admission
	g.kvWrite(streams.LimitsBucket) // and is the one writer of the slots and rate tokens (it releases ended runs' slots too)
	g.kvWatch(streams.LimitsBucket)
	g.kvWatch(streams.HeartbeatsBucket) // the heartbeat watcher follows the attempts' heartbeats (the workers alone write them)
	g.kvWrite(streams.SchedulesBucket)  // its schedule runner is the one writer of the schedules: it fires them, advances their state
	g.kvWatch(streams.SchedulesBucket)
	g.liveness()                     // and starts their runs with the build and flow control of their definitions
	g.kvWrite(streams.BatchesBucket) // its batch executor is the one writer of the jobs: it records each job's targets and progress
	g.kvWatch(streams.BatchesBucket)
	g.kvWatch(streams.RunsBucket)        // and reads the runs index to find a job's targets
	g.objRead(streams.CheckpointsBucket) // it reads a run's checkpoint before a timer's fire (the history service writes them)
	// Its batch jobs' resets ask the history service, the start keys' one writer, for their
	// workflows' reset locks.
	g.publish(api.SubjectStartKeysPrefix + "*")
	// The leaders of the schedule runner and the batch executor answer the changes the ingress
	// forwards (micro services, with $SRV discovery).
	g.subscribe(api.SchedulerSchedulesGroup+".*", api.SchedulerBatchesGroup+".*", "$SRV.*",
		"$SRV.*."+api.SchedulerSchedulesService, "$SRV.*."+api.SchedulerSchedulesService+".*",
		"$SRV.*."+api.SchedulerBatchesService, "$SRV.*."+api.SchedulerBatchesService+".*")
	return g.role(Scheduler, "the scheduler (`flowd scheduler`)")
}

// ingressRole: the ingress takes inputs on flow.ingress.> (queue group flow-ingress), answers
// them, appends them to the runs, finds hooks by token and definitions' workers, and dead-letters
// rejected publishes that asked for no reply.
func ingressRole() Role {
	g := service(Ingress)
	// It signs the inputs it appends (internal/inputsig).
	g.kvRead(streams.SecretsBucket)
	g.kvRead(streams.HooksBucket)        // it finds the run of a hook delivery by its token
	g.kvRead(streams.RunsBucket)         // it tells an input for a run deleted after its retention period why
	g.kvWatch(streams.SchedulesBucket)   // it describes and lists schedules (the scheduler changes them)
	g.kvWrite(streams.PausesBucket)      // it pauses and unpauses definitions and queues
	g.objWrite(streams.PayloadsBucket)   // it offloads large inputs (docs/large-payloads.md)
	g.objRead(streams.CheckpointsBucket) // it reads a run's checkpoint before an input (the history service writes them)
	g.liveness()
	g.append(streams.DeadLetter, api.DeadLetterPrefix+">")
	g.subscribe(api.IngressPrefix + ">")
	// The HTTP query route asks the workers, after reading a run's first event from the history
	// service to address them.
	g.publish(api.QueryPrefix+">", api.SubjectHistory)
	g.publish(api.SubjectUpdate) // its HTTP doors ask the history service where an update stands
	// It asks the history service, the start keys' one writer, to claim, replace and release the
	// dedup and debounce keys of starts.
	g.publish(api.SubjectStartKeysPrefix + "*")
	// It reads and lists batch jobs, and counts a dry run's runs in the index.
	g.kvWatch(streams.BatchesBucket)
	g.kvWatch(streams.RunsBucket)
	g.subscribe(api.BatchPrefix + ">")
	// It forwards the changes of schedules and batch jobs to the scheduler, their one writer.
	g.publish(api.SchedulerSchedulesGroup+".*", api.SchedulerBatchesGroup+".*")
	// It offers new runs to live workers (eager start).
	g.publish(api.EagerOffersFilter)
	return g.role(Ingress, "the ingress (`flowd ingress`)")
}

// workerRole: a worker pulls resume tasks of its queue (durable consumers worker-<queue>...),
// drives runs, registers its definitions and its liveness, and asks the history service to
// claim the tokens of the hooks its runs create and to park runs it cannot drive.
func workerRole() Role {
	g := service(Worker)
	g.follow() // while steps run, it listens for other writers' commits (a signal, a cancellation)
	g.consume(streams.Tasks, "*", "`worker-<queue>...`")
	g.liveness()
	g.kvWrite(streams.WorkersBucket)
	g.kvWrite(streams.DefinitionsBucket)
	g.kvWrite(streams.StepLimitsBucket)  // it takes and releases the slots of limited steps (flow.LimitStep)
	g.kvWrite(streams.HeartbeatsBucket)  // it records step attempts' starts and heartbeats, and reads the last details
	g.kvWatch(streams.PausesBucket)      // it starts no decision or attempt of a paused definition or queue
	g.objWrite(streams.PayloadsBucket)   // it offloads large payloads and reads them (docs/large-payloads.md)
	g.objRead(streams.CheckpointsBucket) // it reads snapshot checkpoints (the history service writes them)
	// It asks the history service, the one writer of FLOW_HOOKS and FLOW_PARKED, to claim hook
	// tokens and to park runs.
	g.publish(api.SubjectHookClaim, api.SubjectPark)
	// It answers the queries of the runs it can run the code of (a micro service, with $SRV
	// discovery).
	g.subscribe(api.QueryPrefix+">", "$SRV.*", "$SRV.*.flow-worker", "$SRV.*.flow-worker.*")
	// It takes the ingress's offers of new runs, answers on an offered run's driving subject
	// while it drives the run, and asks there before it drives a run whose task was offered.
	g.subscribe(api.EagerOffersFilter, api.EagerDrivingFilter)
	g.publish(api.EagerDrivingFilter)
	return g.role(Worker, "workers (`flowd worker`, programs running `worker.New`)")
}

// clientRole: clients start, signal, deliver to hooks, cancel and terminate through the ingress,
// query the history service and watch the event feed. They touch no stream: the history service
// reads offloaded payloads for them (api.SubjectPayload, under flow.api.>: Client.Payload,
// Client.Result).
func clientRole() Role {
	var g grants
	g.publish(api.IngressPrefix+">", "flow.api.>", api.QueryPrefix+">")
	g.replies(Client)
	g.subscribe(api.FeedPrefix + ">")
	return g.role(Client, "clients: `flow.Client`, the `flow` CLI, your programs")
}
