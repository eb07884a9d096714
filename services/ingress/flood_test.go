package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/ingress"
)

// The signal flood: many signals to one run from many senders, while
// other runs are signalled and must still answer quickly.

// sink waits for the signal "never", which never comes: every other signal it receives stays
// pending (buffered, unconsumed).
func sink(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
	if p := ctx.Signal("never"); p != nil {
		return ctx.Complete(p), nil
	}
	return ctx.AwaitSignal("never", "never"), nil
}

// probe waits for the signal "go" and completes with its payload.
func probe(ctx *flow.Context, _ json.RawMessage) (flow.Decision, error) {
	if p := ctx.Signal("go"); p != nil {
		return ctx.Complete(p), nil
	}
	return ctx.AwaitSignal("go", "go"), nil
}

type floodStack struct {
	client *flow.Client
	base   string
}

// The bearer tokens of the flood's senders and of the probes: two senders.
const (
	floodToken = "flood-token"
	probeToken = "probe-token"
)

// floodSetup runs Flow in this process as `flow dev` does: NATS, the history service, the
// ingress (HTTP on a loopback port), a worker and the scheduler.
func floodSetup(t *testing.T, cfg ingress.Config) *floodStack {
	t.Helper()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Tokens = []string{floodToken, probeToken}
	b, _ := setupParts(t, cfg, parts{register: func(reg *flow.Registry) {
		flow.RegisterWorkflow(reg, "sink", sink)
		flow.RegisterWorkflow(reg, "probe", probe)
	}})
	return &floodStack{client: b.client, base: b.base}
}

// signalHTTP posts one signal over HTTP with bearer token tok and returns the status and the
// Retry-After header.
func (f *floodStack) signalHTTP(ctx context.Context, hc *http.Client, tok, runID, name string, body []byte, idem string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/v1/runs/"+runID+"/signals/"+name, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// signalNATS sends one signal with the client (over NATS) and returns its outcome as HTTP would
// have: 202, or 429 with the Retry-After, or 0 with the error.
func (f *floodStack) signalNATS(ctx context.Context, runID string, payload []byte, id string) (int, string, error) {
	_, err := f.client.Signal(ctx, runID, "flood", json.RawMessage(payload), &flow.DeliveryOptions{DeliveryID: id})
	var rl *flow.RateLimitedError
	switch {
	case err == nil:
		return http.StatusAccepted, "", nil
	case errors.As(err, &rl):
		return http.StatusTooManyRequests, strconv.Itoa(int(rl.RetryAfter.Seconds())), nil
	}
	return 0, "", err
}

// floodResult is what one flood measured.
type floodResult struct {
	sent, accepted, limited, other int
	statuses                       map[int]int
	floodTime                      time.Duration
	floodLat                       []time.Duration
	probeAccept, probeRoundTrip    []time.Duration
	peakHeapInuse, peakRSS         uint64
	baseHeapInuse, baseRSS         uint64
}

// flood sends n signals of size bytes to one sink run from senders goroutines over HTTP, each
// sent once (a 429 is counted, not retried), while a prober signals fresh probe runs one at a
// time and measures the signal's acceptance and the run's completion. Memory is sampled
// meanwhile.
func (f *floodStack) flood(t *testing.T, n, senders, size, probes int) *floodResult {
	ctx := t.Context()
	target, err := f.client.Start(ctx, "sink", nil, nil)
	require.NoError(t, err)
	probeIDs := make([]string, probes)
	for i := range probeIDs {
		probeIDs[i], err = f.client.Start(ctx, "probe", nil, nil)
		require.NoError(t, err)
	}
	for _, id := range append([]string{target}, probeIDs...) {
		require.Eventually(t, func() bool {
			s, err := f.client.Snapshot(ctx, id)
			return err == nil && len(s.SignalWaits) == 1
		}, 30*time.Second, 5*time.Millisecond, "the runs wait for their signal")
	}
	payload, _ := json.Marshal(strings.Repeat("x", size-2)) // a JSON string of size bytes
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders + 4}}

	r := &floodResult{statuses: map[int]int{}}
	runtime.GC()
	r.baseHeapInuse, r.baseRSS = heapInuse(), rss()
	stopSampling := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			r.peakHeapInuse, r.peakRSS = max(r.peakHeapInuse, heapInuse()), max(r.peakRSS, rss())
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	})

	var next atomic.Int64
	var mu sync.Mutex
	floodDone := make(chan struct{})
	var probing sync.WaitGroup
	probing.Go(func() { // one probe at a time, every 50 ms, while the flood lasts
		for i := 0; i < probes; i++ {
			select {
			case <-floodDone:
				return
			case <-time.After(50 * time.Millisecond):
			}
			t0 := time.Now()
			st, _, err := f.signalHTTP(ctx, hc, probeToken, probeIDs[i], "go", []byte(strconv.Itoa(i)), "")
			t1 := time.Now()
			if err != nil || st != http.StatusAccepted {
				t.Errorf("probe %d: status %d, %v", i, st, err)
				return
			}
			var got int
			if err := f.client.Result(ctx, probeIDs[i], &got); err != nil {
				t.Errorf("probe %d: %v", i, err)
				return
			}
			mu.Lock()
			r.probeAccept = append(r.probeAccept, t1.Sub(t0))
			r.probeRoundTrip = append(r.probeRoundTrip, time.Since(t0))
			mu.Unlock()
		}
	})
	start := time.Now()
	var deadline time.Time
	if d, err := time.ParseDuration(os.Getenv("FLOW_FLOOD_FOR")); err == nil {
		deadline = start.Add(d)
	}
	progressDone := make(chan struct{})
	defer close(progressDone)
	go func() {
		tick := time.NewTicker(15 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-tick.C:
				mu.Lock()
				t.Logf("%4.0fs: sent %d, accepted %d, 429 %d, other %d; probes %d, heap in use peak %d MiB, RSS peak %d MiB",
					time.Since(start).Seconds(), r.sent, r.accepted, r.limited, r.other, len(r.probeAccept), r.peakHeapInuse>>20, r.peakRSS>>20)
				mu.Unlock()
			}
		}
	}()
	overNATS := os.Getenv("FLOW_FLOOD_DOOR") == "nats"
	var senders_ sync.WaitGroup
	for range senders {
		senders_.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || !deadline.IsZero() && time.Now().After(deadline) {
					return
				}
				t0 := time.Now()
				var st int
				var ra string
				var err error
				if overNATS {
					st, ra, err = f.signalNATS(ctx, target, payload, "flood-"+strconv.FormatInt(i, 10))
				} else {
					st, ra, err = f.signalHTTP(ctx, hc, floodToken, target, "flood", payload, "flood-"+strconv.FormatInt(i, 10))
				}
				d := time.Since(t0)
				mu.Lock()
				r.sent++
				r.floodLat = append(r.floodLat, d)
				switch {
				case err != nil:
					r.other++
				case st == http.StatusAccepted:
					r.accepted++
				case st == http.StatusTooManyRequests:
					r.limited++
					if ra == "" {
						t.Errorf("a 429 without Retry-After")
					}
				default:
					r.other++
				}
				r.statuses[st]++
				mu.Unlock()
			}
		})
	}
	senders_.Wait()
	r.floodTime = time.Since(start)
	close(floodDone)
	probing.Wait()
	close(stopSampling)
	sampled.Wait()

	// Nothing accepted is lost: the run's history holds every accepted signal.
	got := 0
	for after, more := uint64(0), true; more; {
		page, m, err := f.client.HistoryPage(ctx, target, after, 500)
		require.NoError(t, err)
		for _, e := range page {
			if sig, ok := e.Payload.(*event.SignalReceived); ok && sig.Name == "flood" {
				got++
			}
			after = e.Seq
		}
		more = m && len(page) > 0
	}
	require.Equal(t, r.accepted, got, "every accepted signal is in the run's history, and no other")
	return r
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// rss is this process's resident set size, from /proc (0 where there is none).
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func (r *floodResult) String() string {
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	return fmt.Sprintf("flood: sent %d in %.1fs (%.0f/s sent, %.0f/s accepted): accepted %d, 429 %d, other %d %v; latency p50 %v p99 %v max %v\n"+
		"probes: %d; accept p50 %v p99 %v max %v; round trip (signal to result) p50 %v p99 %v max %v\n"+
		"memory: heap in use %.0f MiB before, peak %.0f MiB; RSS %.0f MiB before, peak %.0f MiB",
		r.sent, r.floodTime.Seconds(), float64(r.sent)/r.floodTime.Seconds(), float64(r.accepted)/r.floodTime.Seconds(),
		r.accepted, r.limited, r.other, r.statuses,
		pct(r.floodLat, .5).Round(time.Millisecond), pct(r.floodLat, .99).Round(time.Millisecond), pct(r.floodLat, 1).Round(time.Millisecond),
		len(r.probeAccept), pct(r.probeAccept, .5).Round(100*time.Microsecond), pct(r.probeAccept, .99).Round(100*time.Microsecond), pct(r.probeAccept, 1).Round(100*time.Microsecond),
		pct(r.probeRoundTrip, .5).Round(100*time.Microsecond), pct(r.probeRoundTrip, .99).Round(100*time.Microsecond), pct(r.probeRoundTrip, 1).Round(100*time.Microsecond),
		mib(r.baseHeapInuse), mib(r.peakHeapInuse), mib(r.baseRSS), mib(r.peakRSS))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestSignalFloodMeasure measures the signal flood: 5,000 signals of 1 KB
// to one run from 16 senders over HTTP, with probes signalling other runs. It only runs with
// FLOW_FLOOD=1 (not under -race: it measures); FLOW_FLOOD_N, _SENDERS, _BYTES and _PROBES
// change its size, FLOW_FLOOD_FOR (a duration) stops the senders early, and FLOW_FLOOD_DOOR=nats
// sends the flood with the Go client over NATS instead of HTTP. It reports the figures; it asserts only that nothing accepted is lost.
func TestSignalFloodMeasure(t *testing.T) {
	if os.Getenv("FLOW_FLOOD") != "1" {
		t.Skip("set FLOW_FLOOD=1 to run the signal flood measurement")
	}
	f := floodSetup(t, floodConfig(t))
	r := f.flood(t, envInt("FLOW_FLOOD_N", 5000), envInt("FLOW_FLOOD_SENDERS", 16), envInt("FLOW_FLOOD_BYTES", 1024), envInt("FLOW_FLOOD_PROBES", 600))
	t.Log("\n" + r.String())
}

// floodConfig is the ingress configuration the measurement runs with: the defaults, or what
// the environment sets (FLOW_INGRESS_RUN_RATE=-1 turns the run limit off, and so on).
func floodConfig(t *testing.T) ingress.Config {
	var cfg ingress.Config
	require.NoError(t, envconfig.Process("FLOW", &cfg))
	return cfg
}

// TestSignalFloodLimits is the short signal flood: a flood over the run's
// rate is refused with 429 and Retry-After, and every signal accepted is in the run's history,
// while other runs still take their signals. Before the limits, every signal was taken.
func TestSignalFloodLimits(t *testing.T) {
	f := floodSetup(t, ingress.Config{RunRate: 20, RunBurst: 20, MaxPendingInputs: 60})
	r := f.flood(t, 150, 8, 1024, 10)
	t.Log("\n" + r.String())
	require.Positive(t, r.limited, "the flood is refused past the run's rate")
	require.Zero(t, r.other, "nothing but 202 and 429: %v", r.statuses)
	require.GreaterOrEqual(t, r.accepted, 20, "the burst is taken")
	require.LessOrEqual(t, r.accepted, 60, "no more than the pending limit is taken")
}

// TestPendingInputsBound: a run that does not consume its signals takes up to the pending
// limit, then refuses more with 429 too_many_pending, over HTTP and NATS; a repeated delivery
// and the signal the run awaits are still taken, and other runs are not affected.
func TestPendingInputsBound(t *testing.T) {
	f := floodSetup(t, ingress.Config{RunRate: -1, MaxPendingInputs: 5, MaxPendingBytes: -1})
	ctx := t.Context()
	sinkID, err := f.client.Start(ctx, "sink", nil, nil)
	require.NoError(t, err)
	probeID, err := f.client.Start(ctx, "probe", nil, nil)
	require.NoError(t, err)
	for _, id := range []string{sinkID, probeID} {
		require.Eventually(t, func() bool {
			s, err := f.client.Snapshot(ctx, id)
			return err == nil && len(s.SignalWaits) == 1
		}, 20*time.Second, 5*time.Millisecond)
	}
	hc := &http.Client{}
	for i := range 5 {
		st, _, err := f.signalHTTP(ctx, hc, floodToken, sinkID, "flood", []byte(`"x"`), "d"+strconv.Itoa(i))
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, st, "signal %d", i)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/v1/runs/"+sinkID+"/signals/flood", strings.NewReader(`"x"`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+floodToken)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	var body struct {
		Code       string `json:"code"`
		Message    string `json:"message"`
		RetryAfter int    `json:"retry_after"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	_ = resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "too_many_pending", body.Code)
	require.Contains(t, body.Message, "not consuming")
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Equal(t, 5, body.RetryAfter)

	// Over NATS: a typed error to branch on.
	_, err = f.client.Signal(ctx, sinkID, "flood", "x", nil)
	var rl *flow.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.ErrorIs(t, err, flow.ErrRateLimited)
	require.True(t, rl.Pending)
	require.Equal(t, 5*time.Second, rl.RetryAfter)

	// A repeated delivery is still accepted, once.
	st, _, err := f.signalHTTP(ctx, hc, floodToken, sinkID, "flood", []byte(`"x"`), "d0")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, st)
	// Another run takes its signal.
	_, err = f.client.Signal(ctx, probeID, "go", 1, nil)
	require.NoError(t, err)
	var got int
	require.NoError(t, f.client.Result(ctx, probeID, &got))
	require.Equal(t, 1, got)
	// The signal the full run awaits is taken: it is consumed, not pending.
	_, err = f.client.Signal(ctx, sinkID, "never", "done", nil)
	require.NoError(t, err)
	var out string
	require.NoError(t, f.client.Result(ctx, sinkID, &out))
	require.Equal(t, "done", out)
	s, err := f.client.Snapshot(ctx, sinkID)
	require.NoError(t, err)
	require.Len(t, s.Signals, 6, "five flood signals and the awaited one")
}

// TestSourceRateLimit: one sender over its rate is refused with 429 rate_limited whichever run
// it signals, while other senders (another bearer token, the client's NATS connection) are not.
func TestSourceRateLimit(t *testing.T) {
	f := floodSetup(t, ingress.Config{RunRate: -1, SourceRate: 0.01, SourceBurst: 8})
	ctx := t.Context()
	ids := make([]string, 5) // five of the NATS client's eight inputs
	for i := range ids {
		var err error
		ids[i], err = f.client.Start(ctx, "sink", nil, nil)
		require.NoError(t, err)
	}
	hc := &http.Client{}
	for i := range 8 {
		st, _, err := f.signalHTTP(ctx, hc, floodToken, ids[i%4], "flood", []byte(`1`), "")
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, st)
	}
	st, retryAfter, err := f.signalHTTP(ctx, hc, floodToken, ids[4], "flood", []byte(`1`), "")
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, st, "the sender's ninth input, to a run it did not signal yet")
	secs, err := strconv.Atoi(retryAfter)
	require.NoError(t, err)
	require.Greater(t, secs, 60, "a token every 100 s")
	// Another bearer token is another sender.
	st, _, err = f.signalHTTP(ctx, hc, probeToken, ids[4], "flood", []byte(`1`), "")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, st)
	// The NATS client is another sender: its three inputs left are taken.
	for i := range 3 {
		_, err := f.client.Signal(ctx, ids[4], "flood", i, nil)
		require.NoError(t, err)
	}
	_, err = f.client.Signal(ctx, ids[4], "flood", 3, nil)
	var rl *flow.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.False(t, rl.Pending)
	require.Greater(t, rl.RetryAfter, time.Minute)
}
