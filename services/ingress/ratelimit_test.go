package ingress

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
)

func TestLimitersRefuseWithRetryAfter(t *testing.T) {
	l := newLimiters("run", 2, 3) // 2 a second, 3 at once
	now := time.Unix(1000, 0)
	for range 3 {
		ok, _ := l.allow("r", now)
		require.True(t, ok)
	}
	ok, wait := l.allow("r", now)
	require.False(t, ok)
	require.InDelta(t, 500*time.Millisecond, wait, float64(time.Millisecond))
	require.Equal(t, 1, retryAfterSeconds(wait))
	ok, _ = l.allow("other", now)
	require.True(t, ok, "buckets are per key")
	ok, _ = l.allow("r", now.Add(500*time.Millisecond))
	require.True(t, ok, "refilled")
	require.Nil(t, newLimiters("run", -1, 0), "a rate of 0 or less is no limit")
	ok, _ = (*limiters)(nil).allow("r", now)
	require.True(t, ok)
}

func TestLimitersKeepBoundedKeys(t *testing.T) {
	l := newLimiters("source", 1, 1)
	now := time.Unix(1000, 0)
	for i := range 3 * limiterKeys {
		l.allow(strconv.Itoa(i), now)
	}
	require.Equal(t, limiterKeys, l.m.Len())
}

func TestRunTurnsSerialiseAndBoundTheQueue(t *testing.T) {
	var turns runTurns
	ctx := t.Context()
	release, e := turns.take(ctx, "r")
	require.Nil(t, e)
	// Another run has its own turn.
	other, e := turns.take(ctx, "o")
	require.Nil(t, e)
	other()
	// A second input to r waits for the first.
	got := make(chan func(), 1)
	go func() {
		rel, e := turns.take(ctx, "r")
		if e == nil {
			got <- rel
		}
	}()
	select {
	case <-got:
		t.Fatal("two inputs to one run had the turn at once")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	(<-got)()
	// The waiting line is bounded; one that waits past its context gives up.
	release, e = turns.take(ctx, "r")
	require.Nil(t, e)
	cctx, cancel := context.WithCancel(ctx)
	waiting := make(chan *api.IngressError, maxRunQueue)
	for range maxRunQueue {
		go func() { _, e := turns.take(cctx, "r"); waiting <- e }()
	}
	require.Eventually(t, func() bool {
		turns.mu.Lock()
		defer turns.mu.Unlock()
		return turns.m["r"].users == maxRunQueue+1
	}, 10*time.Second, time.Millisecond)
	_, e = turns.take(ctx, "r")
	require.NotNil(t, e)
	require.Equal(t, api.CodeRateLimited, e.Code)
	require.Equal(t, 1, e.RetryAfter)
	cancel()
	for range maxRunQueue {
		require.Equal(t, api.CodeIngressBusy, (<-waiting).Code)
	}
	release()
	turns.mu.Lock()
	require.Empty(t, turns.m, "no entry outlives its users")
	turns.mu.Unlock()
}

// A sender is its bearer token only where tokens are checked: else anyone could make up a new
// one for each request and a new bucket with it.
func TestHTTPSourceTrustsOnlyCheckedTokens(t *testing.T) {
	req := func(tok string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/runs/r/signals/s", nil)
		r.RemoteAddr = "192.0.2.7:40000"
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return r
	}
	open, err := newAuthenticator(nil, "")
	require.NoError(t, err)
	s := &Service{auth: open}
	signal := &input{kind: api.KindSignal}
	require.Equal(t, "address 192.0.2.7", s.httpSource(req("made-up"), signal))

	authed, err := newAuthenticator([]string{"a", "b"}, "")
	require.NoError(t, err)
	s = &Service{auth: authed}
	a, b := s.httpSource(req("a"), signal), s.httpSource(req("b"), signal)
	require.NotEqual(t, a, b)
	require.Regexp(t, `^token [0-9a-f]{12}$`, a, "the token is hashed")
	require.Equal(t, "address 192.0.2.7", s.httpSource(req("a"), &input{kind: api.KindHook}), "hook callbacks take no token")
}

// A refusal is held before it is answered, unless too many are held already.
func TestRefusalsAreHeld(t *testing.T) {
	a := newAdmission(Config{RunRate: 1, RunBurst: 1, SourceRate: -1})
	in := &input{kind: api.KindSignal, runID: "r", source: "s"}
	release, e := a.admit(t.Context(), in)
	require.Nil(t, e)
	release()
	t0 := time.Now()
	_, e = a.admit(t.Context(), in)
	require.Equal(t, api.CodeRateLimited, e.Code)
	require.GreaterOrEqual(t, time.Since(t0), refusalHold)
	for range heldMax {
		a.held <- struct{}{}
	}
	t0 = time.Now()
	_, e = a.admit(t.Context(), in)
	require.Equal(t, api.CodeRateLimited, e.Code)
	require.Less(t, time.Since(t0), refusalHold, "answered at once")
	for range heldMax {
		<-a.held
	}
	t0 = time.Now()
	_, e = a.admit(t.Context(), &input{kind: api.KindSignal, runID: "r", source: natsSourcePrefix + "_INBOX.abc"})
	require.Equal(t, api.CodeRateLimited, e.Code)
	require.Less(t, time.Since(t0), refusalHold, "a NATS input's refusal holds no slot")
}
