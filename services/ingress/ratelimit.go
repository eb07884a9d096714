package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/bearer"
	"github.com/flowrun/flow/internal/lru"
)

// Input admission (docs/ingress.md, "Limits"): before an input is applied, it takes a token
// from its sender's bucket and from its run's, and then waits its turn behind the other inputs
// to the same run that this process is applying, so that a flooded run is written by one
// request at a time instead of by many that conflict and read it again. The buckets and turns
// are this process's: with several ingress replicas, each enforces the rates on what it gets.

// Defaults of the admission settings (Config).
const (
	DefaultRunRate          = 100
	DefaultSourceRate       = 2000
	DefaultMaxPendingInputs = 10_000
	DefaultMaxPendingBytes  = 4 << 20
	DefaultCacheSize        = 1000
)

// limiterKeys bounds the buckets each table keeps: past it the least recently used is dropped
// (an idle sender's or run's bucket, refilled anyway), so that the tables cost at most a few MB
// whatever the number of runs and senders.
const limiterKeys = 10_000

// maxRunQueue bounds the inputs of one run waiting for their turn in this process; beyond it,
// an input is refused as rate limited.
const maxRunQueue = 64

// refusalHold is how long a rate_limited refusal is held before it is answered, and heldMax how
// many are held at once (past it, refusals are answered at once): a sender that ignores
// Retry-After and asks again at once would otherwise make the ingress spend its CPU on refusals,
// at the expense of every other run's inputs. A sender that honours Retry-After waits longer
// anyway.
const (
	refusalHold = 250 * time.Millisecond
	heldMax     = 1024
)

// pendingRetryAfter is the Retry-After of an input refused because its run holds too many
// pending inputs: a guess, since it depends on the workflow consuming them.
const pendingRetryAfter = 5 * time.Second

// limiters is a table of token buckets by key, of bounded size. Safe for concurrent use.
type limiters struct {
	what  string // "run" or "source", for messages
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  *lru.Cache[string, *rate.Limiter]
}

// newLimiters returns a table of buckets of perSecond tokens a second up to burst, or nil (no
// limit) when perSecond is not positive.
func newLimiters(what string, perSecond float64, burst int) *limiters {
	if perSecond <= 0 {
		return nil
	}
	return &limiters{what: what, limit: rate.Limit(perSecond), burst: max(1, burst), m: lru.New[string, *rate.Limiter](limiterKeys)}
}

// allow takes a token of key's bucket at now, or returns how long until one is there.
func (l *limiters) allow(key string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.m.Get(key)
	if !ok {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m.Put(key, lim)
	}
	if lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / float64(l.limit) * float64(time.Second))
}

// runTurns serialises the inputs this process applies to each run. Entries exist while an input
// holds or waits for its run's turn.
type runTurns struct {
	mu sync.Mutex
	m  map[string]*runTurn
}

type runTurn struct {
	ch    chan struct{} // holds a value while an input has the turn
	users int           // the input holding the turn and those waiting
}

// take waits for run runID's turn and returns its release, or an error when ctx ends first or
// too many inputs wait.
func (t *runTurns) take(ctx context.Context, runID string) (func(), *api.IngressError) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string]*runTurn{}
	}
	rt := t.m[runID]
	if rt == nil {
		rt = &runTurn{ch: make(chan struct{}, 1)}
		t.m[runID] = rt
	}
	if rt.users > maxRunQueue {
		t.mu.Unlock()
		return nil, rateLimited(fmt.Sprintf("%d inputs to run %q are already waiting in this ingress; send fewer at once", maxRunQueue, runID), time.Second)
	}
	rt.users++
	t.mu.Unlock()
	release := func() {
		t.mu.Lock()
		if rt.users--; rt.users == 0 {
			delete(t.m, runID)
		}
		t.mu.Unlock()
	}
	select {
	case rt.ch <- struct{}{}:
		return func() { <-rt.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("the input waited too long behind other inputs to run %q (%v); retry with the same delivery ID", runID, ctx.Err())}
	}
}

// admission holds the limits of Config: sender and run buckets, and run turns.
type admission struct {
	sources, runs *limiters
	turns         runTurns
	now           func() time.Time
	// held takes a slot while a refusal is held (refusalHold).
	held chan struct{}
}

func newAdmission(cfg Config) *admission {
	return &admission{sources: newLimiters("source", cfg.SourceRate, cfg.SourceBurst), runs: newLimiters("run", cfg.RunRate, cfg.RunBurst),
		now: time.Now, held: make(chan struct{}, heldMax)}
}

// hold delays the refusal e of in by refusalHold, unless heldMax refusals are held already or
// ctx ends first, and returns it. A NATS input's refusal is answered at once: holding it would
// hold one of the slots of Config.Concurrency, and a NATS sender is not slowed by it anyway.
func (a *admission) hold(ctx context.Context, in *input, e *api.IngressError) *api.IngressError {
	if strings.HasPrefix(in.source, natsSourcePrefix) {
		return e
	}
	select {
	case a.held <- struct{}{}:
	default:
		return e
	}
	t := time.NewTimer(refusalHold)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	<-a.held
	return e
}

// admit takes in's tokens and its run's turn; the caller calls release once in is applied.
// It refuses in with rate_limited when a bucket is empty, after refusalHold; an input its run's
// bucket refuses still costs its sender a token.
func (a *admission) admit(ctx context.Context, in *input) (release func(), _ *api.IngressError) {
	now := a.now()
	if ok, wait := a.sources.allow(in.source, now); !ok {
		return nil, a.hold(ctx, in, rateLimited(fmt.Sprintf("this sender (%s) sends more than %g inputs a second (FLOW_INGRESS_SOURCE_RATE, burst FLOW_INGRESS_SOURCE_BURST); slow down and retry after the Retry-After delay",
			in.source, float64(a.sources.limit)), wait))
	}
	key := runKey(in)
	if key == "" {
		return func() {}, nil
	}
	if ok, wait := a.runs.allow(key, now); !ok {
		return nil, a.hold(ctx, in, rateLimited(fmt.Sprintf("run %q gets more than %g inputs a second (FLOW_INGRESS_RUN_RATE, burst FLOW_INGRESS_RUN_BURST); slow down and retry after the Retry-After delay",
			runOrHook(in), float64(a.runs.limit)), wait))
	}
	return a.turns.take(ctx, key)
}

// runKey is the key of in's run for its bucket and turn: its run ID, or a hook's token (whose
// run is known once it is looked up); "" for a start, which names no existing run.
func runKey(in *input) string {
	switch {
	case in.kind == api.KindStart:
		return ""
	case in.kind == api.KindHook:
		return "hook/" + in.token
	}
	return in.runID
}

func runOrHook(in *input) string {
	if in.kind == api.KindHook {
		return "of hook " + in.token
	}
	return in.runID
}

// rateLimited is the refusal of an input over a rate, to retry after wait (whole seconds, at
// least one).
func rateLimited(msg string, wait time.Duration) *api.IngressError {
	return &api.IngressError{Code: api.CodeRateLimited, Message: msg, RetryAfter: retryAfterSeconds(wait)}
}

func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// httpSource names the sender of HTTP request r, of input in, for its bucket: the bearer token
// it was authorized with (hashed: the table holds no secret), or, on a route without one (hook
// callbacks, or every route when no token is configured), its remote address. Behind a proxy
// every request has the proxy's address: give each client a token.
func (s *Service) httpSource(r *http.Request, in *input) string {
	if in.kind != api.KindHook && s.auth.enabled() {
		if tok, _ := bearer.FromHeader(r.Header.Get("Authorization")); tok != "" {
			sum := sha256.Sum256([]byte(tok))
			return "token " + hex.EncodeToString(sum[:6])
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address " + host
}

// natsSource names the sender of a NATS message for its bucket: the reply inbox's prefix, which
// names the requester's connection (nats.go replies to _INBOX.<connection>.<request>, or the
// connection's custom inbox prefix), else the subject's kind for plain publishes. NATS does not
// tell a subscriber who published: a client that makes up reply subjects gets a bucket for
// each, and only the run buckets and the NATS permissions hold it.
func natsSource(m *nats.Msg) string {
	if m.Reply == "" {
		return natsSourcePrefix + "publish"
	}
	prefix := m.Reply
	if i := strings.LastIndexByte(prefix, '.'); i > 0 {
		prefix = prefix[:i]
	}
	if len(prefix) > 128 {
		prefix = prefix[:128]
	}
	return natsSourcePrefix + prefix
}

// natsSourcePrefix starts the name of every NATS sender.
const natsSourcePrefix = "nats "
