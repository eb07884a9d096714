package natsperm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/backend/streams"
	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsperm"
	"github.com/flowrun/flow/pkg/flow"
)

// operation is one thing a NATS user may try: a publish (a JetStream API request, a write to a
// stream's subject, a request to a service) or a subscription, and the roles the policy lets do
// it. The policy is written here by hand, apart from roles.go, so that the test checks the
// grants against what each role is meant to do, not against themselves. An operation whose what
// begins with rollUp is a publish with the header `Nats-Rollup: all`, done only if JetStream
// stores it (and purges its stream), not only if the permissions let it through.
type operation struct {
	what    string
	subject string
	sub     bool
	allowed []string
}

// rollUp begins the what of the operations that roll up a stream (see operation).
const rollUp = "roll up "

// Role sets of the policy.
var (
	none      []string
	historyOn = []string{natsperm.History}
	engines   = []string{natsperm.History, natsperm.Scheduler, natsperm.Ingress, natsperm.Worker} // run the engine
	followers = []string{natsperm.History, natsperm.Scheduler, natsperm.Worker}                   // follow commits
	answerers = engines                                                                           // answer requests
)

// bucketWriters is the policy of who writes each bucket's keys (puts, deletes, purges of a key).
var bucketWriters = map[string][]string{
	streams.TimersBucket:      historyOn,
	streams.HooksBucket:       historyOn,
	streams.RunsBucket:        historyOn,
	streams.DefinitionsBucket: {natsperm.Worker},
	streams.LeasesBucket:      {natsperm.Scheduler}, // the history service writes its own lease keys only
	streams.ParkedBucket:      historyOn,
	streams.DamagedBucket:     historyOn,
	streams.WorkersBucket:     {natsperm.Worker},
	streams.StartKeysBucket:   historyOn,
	streams.LimitsBucket:      {natsperm.Scheduler},
	streams.StepLimitsBucket:  {natsperm.Worker},
	streams.QueueBucket:       historyOn,
	streams.HeartbeatsBucket:  {natsperm.Worker},
	streams.SchedulesBucket:   {natsperm.Scheduler},
	streams.BatchesBucket:     {natsperm.Scheduler},
	streams.PausesBucket:      {natsperm.Ingress},
	streams.SecretsBucket:     historyOn, // the input-signing key: the history service creates it
}

// objectWriters is the policy of who writes each object store; the history service alone purges
// one (deleting objects, overwriting them, sweeping orphaned chunks).
var objectWriters = map[string][]string{
	streams.ArchiveBucket:     historyOn,
	streams.PayloadsBucket:    {natsperm.History, natsperm.Ingress, natsperm.Worker},
	streams.CheckpointsBucket: historyOn,
}

// readers is the policy of who reads each stream's messages directly (DIRECT.GET).
var readers = map[string][]string{
	streams.History:                    engines,
	streams.Tasks:                      {natsperm.Scheduler}, // workers pull resume tasks through their consumers; the scheduler looks for a run's task before it fires a timer it handed off
	streams.DeadLetter:                 none,
	"KV_" + streams.TimersBucket:       {natsperm.History, natsperm.Scheduler},
	"KV_" + streams.HooksBucket:        {natsperm.History, natsperm.Ingress},
	"KV_" + streams.RunsBucket:         {natsperm.History, natsperm.Scheduler, natsperm.Ingress},
	"KV_" + streams.DefinitionsBucket:  engines,
	"KV_" + streams.LeasesBucket:       {natsperm.History, natsperm.Scheduler},
	"KV_" + streams.ParkedBucket:       historyOn,
	"KV_" + streams.DamagedBucket:      engines,
	"KV_" + streams.WorkersBucket:      engines,
	"KV_" + streams.StartKeysBucket:    historyOn,
	"KV_" + streams.LimitsBucket:       {natsperm.Scheduler},
	"KV_" + streams.StepLimitsBucket:   {natsperm.History, natsperm.Worker},
	"KV_" + streams.QueueBucket:        {natsperm.History, natsperm.Scheduler},
	"KV_" + streams.HeartbeatsBucket:   {natsperm.Scheduler, natsperm.Worker},
	"KV_" + streams.SchedulesBucket:    {natsperm.Scheduler, natsperm.Ingress},
	"KV_" + streams.BatchesBucket:      {natsperm.Scheduler, natsperm.Ingress},
	"KV_" + streams.PausesBucket:       {natsperm.History, natsperm.Ingress, natsperm.Worker},
	"KV_" + streams.SecretsBucket:      {natsperm.History, natsperm.Scheduler, natsperm.Ingress}, // the input writers
	"OBJ_" + streams.ArchiveBucket:     historyOn,
	"OBJ_" + streams.PayloadsBucket:    {natsperm.History, natsperm.Ingress, natsperm.Worker},
	"OBJ_" + streams.CheckpointsBucket: engines,
}

// operations lists what the permissions test tries as every role: the dangerous operations on
// every stream and bucket, the other roles' subjects, and the inboxes.
func operations() []operation {
	js := "$JS.API."
	ops := []operation{
		{"create a stream", js + "STREAM.CREATE.EVIL", false, none},
		{"list the streams", js + "STREAM.LIST", false, none},
		{"purge the account", js + "ACCOUNT.PURGE.$G", false, none},
		{"delete the history service's consumer", js + "CONSUMER.DELETE." + streams.History + "." + streams.HistoryConsumer, false, none},
		{"delete a worker's consumer", js + "CONSUMER.DELETE." + streams.Tasks + ".worker-default", false, none},
		{"create a consumer of the histories", js + "CONSUMER.CREATE." + streams.History + ".spy", false, none},
		{"append to a run's history", "flow.history.r1", false, engines},
		{"publish a resume task", "flow.task.default.r1", false, engines},
		{"publish an event of the feed", api.FeedPrefix + "order.r1.run.completed", false, historyOn},
		{"dead-letter an input", api.DeadLetterPrefix + "signal", false, []string{natsperm.Ingress}},
		{"write the history service's lease", "$KV." + streams.LeasesBucket + "." + streams.RetentionLease, false,
			[]string{natsperm.History, natsperm.Scheduler}},
		{"send an input to the ingress", api.SignalSubject("r1", "approve"), false, []string{natsperm.Client}},
		{"query a run's workflow", api.QueryPrefix + "order.r1", false, []string{natsperm.Ingress, natsperm.Client}},
		{"claim a hook token", api.SubjectHookClaim, false, []string{natsperm.Worker}},
		{"park a run", api.SubjectPark, false, []string{natsperm.Worker}},
		{"claim a start key", api.SubjectStartKeyClaim, false, []string{natsperm.Scheduler, natsperm.Ingress}},
		{"change a schedule at the scheduler", api.SchedulerSchedulesGroup + ".create", false, []string{natsperm.Ingress}},
		{"change a batch job at the scheduler", api.SchedulerBatchesGroup + ".create", false, []string{natsperm.Ingress}},
		{"answer a client's request", natsconn.InboxPrefix(natsperm.Client) + ".x.1", false, answerers},
		{"publish to the $SRV discovery", "$SRV.PING", false, none},
		{"subscribe to every inbox", "_INBOX.>", true, none},
		{"subscribe to the default inboxes", "_INBOX.*.*", true, none},
		{"subscribe to the resume tasks", "flow.task.>", true, none},
		{"follow the histories' commits", "flow.history.>", true, followers},
		{"subscribe to the event feed", api.FeedPrefix + ">", true, []string{natsperm.History, natsperm.Client}},
		{"subscribe to the inputs", api.IngressPrefix + ">", true, []string{natsperm.Ingress}},
		{"subscribe to the hook routes' writes", "$KV." + streams.HooksBucket + ".>", true, none},
		{"subscribe to everything", ">", true, none},
	}
	for _, s := range []string{api.SubjectGet, api.SubjectHistory, api.SubjectList, api.SubjectResume, api.SubjectAwait,
		api.SubjectUpdate, api.SubjectDefinitions, api.SubjectBatchList} {
		allowed := []string{natsperm.Client}
		switch s {
		case api.SubjectHistory, api.SubjectUpdate:
			allowed = append(allowed, natsperm.Ingress) // its query route and HTTP update doors
		case api.SubjectBatchList:
			allowed = append(allowed, natsperm.History) // the web UI, through the ingress
		}
		ops = append(ops, operation{"call " + s, s, false, allowed})
	}
	for _, role := range natsperm.Roles() {
		ops = append(ops, operation{"subscribe to the " + role.Name + "'s inboxes", natsconn.InboxPrefix(role.Name) + ".>", true, []string{role.Name}})
	}
	for _, s := range natsperm.AllStreams {
		purgers := none
		switch s {
		case streams.History, "OBJ_" + streams.ArchiveBucket, "OBJ_" + streams.PayloadsBucket, "OBJ_" + streams.CheckpointsBucket:
			purgers = historyOn // retention (one run's subject); the object stores it owns
		}
		ops = append(ops,
			operation{"purge " + s, js + "STREAM.PURGE." + s, false, purgers},
			operation{"delete " + s, js + "STREAM.DELETE." + s, false, none},
			operation{"delete a message of " + s, js + "STREAM.MSG.DELETE." + s, false, none},
			operation{"update " + s, js + "STREAM.UPDATE." + s, false, historyOn},
			operation{"read " + s + " directly", js + "DIRECT.GET." + s, false, readers[s]},
		)
	}
	for _, b := range natsperm.AllBuckets {
		ops = append(ops, operation{"write or delete a key of " + b, "$KV." + b + ".probe", false, bucketWriters[b]})
	}
	for b, writers := range objectWriters {
		ops = append(ops, operation{"write an object's chunks in " + b, "$O." + b + ".C.probe", false, writers})
	}
	// No role may purge a bucket or the payload store with one message. The history service
	// rolls up the object stores it alone writes (nats.go's ObjectStore.Put does); the writers of
	// the buckets with limit markers may roll them up (nats-server requires rollups there).
	for _, b := range natsperm.AllBuckets {
		var rollers []string
		if b == streams.WorkersBucket || b == streams.StartKeysBucket {
			rollers = bucketWriters[b]
		}
		ops = append(ops, operation{rollUp + b, "$KV." + b + ".probe", false, rollers})
	}
	for b := range objectWriters {
		var rollers []string
		if b != streams.PayloadsBucket {
			rollers = historyOn
		}
		ops = append(ops, operation{rollUp + "OBJ_" + b, "$O." + b + ".M.probe", false, rollers}) // an object's metadata
	}
	slices.SortStableFunc(ops, func(a, b operation) int { return strings.Compare(a.what, b.what) })
	return ops
}

// Every role, logged in against a server loaded with deploy/nats/auth.conf, tries every
// operation: the server refuses exactly those the policy does not give it. The table of role x
// operation, expected and observed, is logged; any mismatch fails the test.
func TestPermissionsMatrix(t *testing.T) {
	srv, _ := runServer(t, "")
	provision(t, srv)
	roles := natsperm.Roles()
	var table strings.Builder
	fmt.Fprintf(&table, "%-48s", "operation")
	for _, r := range roles {
		fmt.Fprintf(&table, " %-10s", r.Name)
	}
	table.WriteString("\n")
	var mismatches []string
	for _, op := range operations() {
		fmt.Fprintf(&table, "%-48s", op.what)
		for _, r := range roles {
			want := slices.Contains(op.allowed, r.Name)
			got := try(t, srv, r.Name, op)
			cell := map[bool]string{true: "yes", false: "no"}[got]
			if got != want {
				cell += "!"
				mismatches = append(mismatches, fmt.Sprintf("%s: %s (%s): expected %v, observed %v", r.Name, op.what, op.subject, want, got))
			}
			fmt.Fprintf(&table, " %-10s", cell)
		}
		table.WriteString("\n")
	}
	t.Logf("may each role do it? (yes/no; ! marks a mismatch with the policy)\n%s", table.String())
	require.Empty(t, mismatches, "the permissions differ from the policy")
}

// provision creates Flow's streams and buckets, as the history service does.
func provision(t *testing.T, srv interface{ ClientURL() string }) {
	t.Helper()
	r := mustRole(t, natsperm.History)
	nc, err := natsconn.Config{URL: srv.ClientURL(), User: r.User, Password: password(r)}.As(natsperm.History).Dial("provision")
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), failFast*4)
	defer cancel()
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
}

// try does op as role on a connection of its own, and reports whether the server allowed it: a
// refusal comes back before the answer to the flush that follows (nats.go records it as the
// connection's last error as it reads it).
func try(t *testing.T, srv interface{ ClientURL() string }, role string, op operation) bool {
	t.Helper()
	r := mustRole(t, role)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(r.User, password(r)), nats.CustomInboxPrefix(r.InboxPrefix),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(t, err)
	defer nc.Close()
	var acks *nats.Subscription
	switch {
	case op.sub:
		_, err = nc.SubscribeSync(op.subject)
	case strings.HasPrefix(op.what, rollUp):
		acks, err = nc.SubscribeSync(r.InboxPrefix + ".rollup")
		require.NoError(t, err)
		err = nc.PublishMsg(&nats.Msg{Subject: op.subject, Reply: acks.Subject, Data: []byte(`{}`),
			Header: nats.Header{jetstream.MsgRollup: []string{jetstream.MsgRollupAll}}})
	default:
		err = nc.Publish(op.subject, nil)
	}
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	last := nc.LastError()
	if last == nil {
		return acks == nil || stored(t, acks, role, op)
	}
	require.True(t, errors.Is(last, nats.ErrPermissionViolation), "%s: %s: %v", role, op.what, last)
	require.Contains(t, last.Error(), op.subject)
	return false
}

// stored reads JetStream's answer to op's publish on acks and reports whether it stored the
// message; a refusal must be the refusal of its rollup.
func stored(t *testing.T, acks *nats.Subscription, role string, op operation) bool {
	t.Helper()
	m, err := acks.NextMsg(failFast * 4)
	require.NoError(t, err, "%s: %s: no answer from JetStream", role, op.what)
	var ack struct {
		Error *jetstream.APIError `json:"error"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &ack), "%s: %s: %s", role, op.what, m.Data)
	if ack.Error == nil {
		return true
	}
	require.Equal(t, rollupRefused, int(ack.Error.ErrorCode), "%s: %s: %s", role, op.what, m.Data)
	return false
}

// Each role's inbox prefix is the one its programs dial with.
func TestInboxPrefixes(t *testing.T) {
	for _, r := range natsperm.Roles() {
		require.Equal(t, natsconn.InboxPrefix(r.Name), r.InboxPrefix)
		require.Contains(t, r.Subscribe, r.InboxPrefix+".>")
		require.NotContains(t, r.Subscribe, "_INBOX.>")
		require.NoError(t, nats.CustomInboxPrefix(r.InboxPrefix)(&nats.Options{}), "nats.go takes %s as an inbox prefix", r.InboxPrefix)
	}
	require.Equal(t, natsconn.InboxPrefix(natsperm.Client), flow.ClientInboxPrefix)
	for name, role := range map[string]string{natsperm.History: natsconn.RoleHistory, natsperm.Scheduler: natsconn.RoleScheduler,
		natsperm.Ingress: natsconn.RoleIngress, natsperm.Worker: natsconn.RoleWorker, natsperm.Client: natsconn.RoleClient} {
		require.Equal(t, name, role)
	}
}
