package natsconn

// The roles of Flow's NATS users (internal/natsperm defines their permissions). Each dials with
// its own inbox prefix, InboxPrefix(role), the only inboxes its user may subscribe to: no role
// receives the replies to another role's requests.
const (
	RoleHistory   = "history"
	RoleScheduler = "scheduler"
	RoleIngress   = "ingress"
	RoleWorker    = "worker"
	RoleClient    = "client"
)

// InboxPrefix returns the prefix of the reply inboxes of role: "_INBOX." + role. Under
// deploy/nats/auth.conf the role's user may subscribe to InboxPrefix(role) + ".>" only, and the
// services answering requests may publish to those of the roles that ask them. A permission
// that allows "_INBOX.>" (the nats CLI's and nsc's default) still covers it.
func InboxPrefix(role string) string { return "_INBOX." + role }

// As returns c for role: its connections take InboxPrefix(role) as their inbox prefix, unless
// the NATS context sets one (inbox_prefix), which then wins.
func (c Config) As(role string) Config {
	c.role = role
	return c
}
