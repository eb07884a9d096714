// Package natsperm defines the NATS permissions of Flow's roles (least privilege): what each
// service, and a client, may publish and subscribe to. It is the single source of
// deploy/nats/auth.conf (see AuthConf) and of the permissions table in docs/operations.md; tests
// run every service as its own user with exactly these permissions.
//
// The roles, their users, the environment variables holding their passwords, and the inbox
// prefixes their programs dial with (natsconn.InboxPrefix; each role may subscribe to its own
// only):
//
//	history    flow-history    NATS_HISTORY_PASSWORD    _INBOX.history
//	scheduler  flow-scheduler  NATS_SCHEDULER_PASSWORD  _INBOX.scheduler
//	ingress    flow-ingress    NATS_INGRESS_PASSWORD    _INBOX.ingress
//	worker     flow-worker     NATS_WORKER_PASSWORD     _INBOX.worker
//	client     flow-client     NATS_CLIENT_PASSWORD     _INBOX.client
//
// Only the history service provisions: it alone may create and update Flow's streams and
// buckets (streams.Provision). The other services call streams.Ensure, which then only reads
// the streams' configuration; they must start after the history service created them (or they
// fail to start, and are restarted), and their FLOW_STREAMS_* settings must be left unset or
// agree with the history service's, since an update they would ask for is refused.
//
// After changing a role, or the subjects a service uses, run `go test ./internal/natsperm
// -rewrite` to regenerate auth.conf and the documentation, and `go test ./internal/natsperm`,
// which fails when a service is refused a subject it needs, and when a role may do what the
// permissions test's policy (matrix_test.go) does not give it, or may not do what it does.
package natsperm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// Role is one kind of NATS user of Flow and the subjects it needs.
type Role struct {
	// Name is the role: history, scheduler, ingress, worker, client.
	Name string
	// User is its user name in the server configuration: "flow-" + Name.
	User string
	// PasswordEnv is the environment variable that holds its password, which nats-server reads
	// when it loads the configuration ($NATS_<NAME>_PASSWORD).
	PasswordEnv string
	// Who says, for the documentation, which programs connect as the role.
	Who string
	// Publish and Subscribe are the subjects (wildcards allowed) the role may publish and
	// subscribe to; everything else is refused.
	Publish, Subscribe []string
	// InboxPrefix is the prefix of the role's reply inboxes (natsconn.InboxPrefix), with which
	// its programs dial: the role may subscribe to InboxPrefix+".>", and to no other inbox.
	InboxPrefix string
	// Answers says whether the role answers requests: it may then publish to every inbox
	// ("_INBOX.>"), and to no other reply subject. No role has nats-server's allow_responses
	// (roles.go says why).
	Answers bool
	// Provisions says whether the role may create and update Flow's streams and buckets.
	Provisions bool
	// JetStream says what the subjects let the role do with each of Flow's streams and buckets,
	// for the documentation: read, append, consume (a durable consumer), write and watch (a
	// bucket's entries). Every role that runs a service may also read every stream's
	// configuration.
	JetStream []Access
}

// Access is what a role may do with one stream or bucket.
type Access struct {
	Name  string
	Verbs []string
}

// Permissions returns r's permissions as nats-server's options express them.
func (r Role) Permissions() *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: slices.Clone(r.Publish)},
		Subscribe: &server.SubjectPermission{Allow: slices.Clone(r.Subscribe)},
	}
}

// The role names.
const (
	History   = "history"
	Scheduler = "scheduler"
	Ingress   = "ingress"
	Worker    = "worker"
	Client    = "client"
)

// Roles returns Flow's roles, in the order of the documentation.
func Roles() []Role {
	return []Role{historyRole(), schedulerRole(), ingressRole(), workerRole(), clientRole()}
}

// Get returns the role named name.
func Get(name string) (Role, error) {
	for _, r := range Roles() {
		if r.Name == name {
			return r, nil
		}
	}
	return Role{}, fmt.Errorf("natsperm: no role %q; the roles are history, scheduler, ingress, worker and client", name)
}

// newRole names a role and its user and password variable.
func newRole(name, who string) Role {
	return Role{Name: name, User: "flow-" + name, PasswordEnv: "NATS_" + strings.ToUpper(name) + "_PASSWORD", Who: who}
}
