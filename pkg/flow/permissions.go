package flow

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"weak"

	"github.com/nats-io/nats.go"
)

// The operations a *PermissionError names.
const (
	// PermissionPublish is the publication of a request to its subject.
	PermissionPublish = "publish"
	// PermissionSubscribe is the subscription to the inbox the replies come to.
	PermissionSubscribe = "subscribe"
	// PermissionReply is the use of the inbox as a request's reply subject.
	PermissionReply = "reply"
)

// PermissionError is a call the NATS server refused for lack of permission. It wraps
// ErrPermissionDenied and Err (which wraps nats.ErrPermissionViolation).
type PermissionError struct {
	// Op is what was refused: PermissionPublish (the request to Subject), PermissionSubscribe
	// (the subscription to the reply inbox Subject) or PermissionReply (Subject as the reply
	// subject of a request).
	Op string
	// Subject is the subject refused.
	Subject string
	// User is the name the connection authenticated with, when it used a user name.
	User string
	// Err is the violation as nats.go reported it.
	Err error
}

func (e *PermissionError) Error() string {
	who := "this connection's NATS user"
	if e.User != "" {
		who = fmt.Sprintf("NATS user %q", e.User)
	}
	var what string
	switch e.Op {
	case PermissionSubscribe:
		what = fmt.Sprintf("subscribe to %q, the inbox its requests' replies come to", e.Subject)
	case PermissionReply:
		what = fmt.Sprintf("name %q as the reply subject of a request", e.Subject)
	default:
		what = fmt.Sprintf("publish to %q", e.Subject)
	}
	return fmt.Sprintf("flow: permission denied: %s may not %s (NATS permissions violation). A Flow client needs the client role's "+
		"permissions (publish flow.ingress.>, flow.api.> and flow.query.>, subscribe "+ClientInboxPrefix+".>), which a service's user such as "+
		"flow-worker does not have; connect with the client role's credentials (user flow-client, password $NATS_CLIENT_PASSWORD) "+
		"and its inbox prefix (nats.CustomInboxPrefix(flow.ClientInboxPrefix), which flow.Dial and the flow command set); "+
		"see docs/operations.md, \"Who writes what: NATS permissions by role\"", who, what)
}

func (e *PermissionError) Unwrap() []error { return []error{ErrPermissionDenied, e.Err} }

// violationRe reads the operation and the subject of a violation as nats-server words it
// ("Permissions Violation for Publish to \"flow.ingress.start.order\"").
var violationRe = regexp.MustCompile(`Violation for (Publish to|Subscription to|Publish with Reply of) "([^"]+)"`)

// violation reads a permissions violation nats.go reported; ok is false for any other error.
func violation(err error, user string) (*PermissionError, bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil, false
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, false
	}
	op := map[string]string{"Publish to": PermissionPublish, "Subscription to": PermissionSubscribe,
		"Publish with Reply of": PermissionReply}[m[1]]
	return &PermissionError{Op: op, Subject: m[2], User: user, Err: err}, true
}

// permWatch learns of a connection's permission violations as the server reports them (an
// -ERR, which nats.go hands to the connection's error handler only), so that a request the
// server refused ends at once instead of waiting out its timeout. There is one per connection
// (permWatches), installed by the first Client on it in front of the connection's error handler,
// which it still calls. A connection whose error handler is replaced later loses it: its refused
// requests are then recognised only when they time out (nc.LastError).
type permWatch struct {
	user string
	// inbox is the prefix of the connection's reply inboxes ("_INBOX.<nuid>."), mux the
	// subscription nats.go makes to them ("_INBOX.<nuid>.*").
	inbox, mux string

	mu      sync.Mutex
	waiters map[*permWaiter]struct{}
	// muxRefused is the refusal of the subscription to mux, and the connection's reconnects
	// then: nats.go subscribes once, so every request fails until a reconnect subscribes again.
	muxRefused *PermissionError
	refusedAt  uint64
}

// permWaiter is a request in flight: cancel ends it with the violation that refused it.
type permWaiter struct {
	subject string
	cancel  context.CancelCauseFunc
}

// permWatches maps a connection (weakly) to its permWatch.
var permWatches sync.Map

// watchPermissions returns nc's permWatch, installing it on first use.
func watchPermissions(nc *nats.Conn) *permWatch {
	key := weak.Make(nc)
	if w, ok := permWatches.Load(key); ok {
		return w.(*permWatch)
	}
	mux := nc.NewRespInbox()
	inbox := mux[:strings.LastIndexByte(mux, '.')+1]
	w := &permWatch{user: nc.Opts.User, inbox: inbox, mux: inbox + "*", waiters: map[*permWaiter]struct{}{}}
	if prev, loaded := permWatches.LoadOrStore(key, w); loaded {
		return prev.(*permWatch)
	}
	next := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		w.report(c, err)
		if next != nil {
			next(c, s, err)
		}
	})
	runtime.AddCleanup(nc, func(k weak.Pointer[nats.Conn]) { permWatches.Delete(k) }, key)
	return w
}

// report ends the requests in flight that violation err refused.
func (w *permWatch) report(nc *nats.Conn, err error) {
	pe, ok := violation(err, w.user)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ours := pe.Op == PermissionSubscribe && pe.Subject == w.mux || pe.Op == PermissionReply && strings.HasPrefix(pe.Subject, w.inbox)
	if pe.Op == PermissionSubscribe && pe.Subject == w.mux {
		w.muxRefused, w.refusedAt = pe, nc.Stats().Reconnects
	}
	for r := range w.waiters {
		if ours || pe.Op == PermissionPublish && pe.Subject == r.subject {
			r.cancel(pe)
		}
	}
}

// refused returns the refusal of the reply inbox's subscription if no reconnect has
// subscribed again since.
func (w *permWatch) refused(nc *nats.Conn) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.muxRefused == nil {
		return nil
	}
	if nc.Stats().Reconnects != w.refusedAt {
		w.muxRefused = nil
		return nil
	}
	return w.muxRefused
}

// await registers a request to subject in flight until the returned func is called.
func (w *permWatch) await(subject string, cancel context.CancelCauseFunc) func() {
	r := &permWaiter{subject: subject, cancel: cancel}
	w.mu.Lock()
	w.waiters[r] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.waiters, r)
		w.mu.Unlock()
	}
}

// request sends msg and returns the reply, as nc.RequestMsgWithContext does, except that a
// request the server refuses for lack of permission ends at once with a *PermissionError (which
// callers must not retry), instead of waiting out ctx.
func (t *transport) request(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	if err := t.perms.refused(t.nc); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := t.perms.await(msg.Subject, cancel)
	defer done()
	reply, err := t.nc.RequestMsgWithContext(rctx, msg)
	if err == nil {
		return reply, nil
	}
	var pe *PermissionError
	if errors.As(context.Cause(rctx), &pe) {
		return nil, pe
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		// The watch may have been bypassed (the error handler replaced): the connection's last
		// error may still tell.
		if pe, ok := violation(t.nc.LastError(), t.perms.user); ok && pe.Op == PermissionPublish && pe.Subject == msg.Subject {
			return nil, pe
		}
	}
	return nil, err
}
