package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// ceSender publishes inputs as a user's service would: CloudEvents built with the SDK, by
// request/reply with plain nats.go, sent again with the same id until the ingress acknowledges
// them.
type ceSender struct {
	nc *nats.Conn
	// retries counts the requests sent again.
	retries *atomic.Int64
}

// send returns once the ingress acknowledged the input, or the error it refused it with.
func (s ceSender) send(ctx context.Context, subject, id string, data any, ext map[string]string) (*api.InputResponse, error) {
	ev := ce.New()
	ev.SetID(id)
	ev.SetSource("crashtest/publisher")
	ev.SetType("test.input")
	for k, v := range ext {
		ev.SetExtension(k, v)
	}
	if err := ev.SetData(ce.ApplicationJSON, data); err != nil {
		return nil, err
	}
	var body bytes.Buffer
	h, err := cenats.WriteMsg(ctx, binding.ToMessage(&ev), &body)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Header: h, Data: body.Bytes()}
	for {
		reply, err := s.nc.RequestMsg(msg, 2*time.Second)
		if err == nil {
			if code := reply.Header.Get(api.HeaderErrorCode); code != "" {
				return nil, fmt.Errorf("%s: %s", code, reply.Data)
			}
			var resp api.InputResponse
			return &resp, json.Unmarshal(reply.Data, &resp)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// No ingress answers (it is being restarted) or none answered in time (it died after
		// taking the request): send the same event again.
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		s.retries.Add(1)
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

func post(t *testing.T, url, contentType, body string) int {
	t.Helper()
	resp, err := http.Post(url, contentType, strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}

// TestServicesAsProcesses runs NATS, the history service, the scheduler, the ingress and a
// worker as separate OS processes, drives runs from outside over HTTP and over NATS (CloudEvents
// built with the SDK on plain nats.go), then kills the ingress with SIGKILL in the middle of a
// load of inputs: every acknowledged input is in its run's history exactly once, and every
// history passes the invariants checker.
func TestServicesAsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six processes")
	}
	t.Parallel()
	dir := t.TempDir()
	natsURL := "nats://" + freeAddr(t)
	httpAddr := freeAddr(t)
	startChild(t, childConfig{Role: roleNATS, Name: "nats", NATSURL: natsURL, Dir: dir})
	base := childConfig{NATSURL: natsURL, Dir: dir}
	with := func(role, name string) childConfig {
		c := base.named(name)
		c.Role = role
		return c
	}
	startChild(t, with(roleHistory, "history"))
	startChild(t, with(roleScheduler, "scheduler"))
	ingressCfg := with(roleIngress, "ingress-1")
	ingressCfg.HTTP = httpAddr
	in := startChild(t, ingressCfg)
	startChild(t, with(roleWorker, "worker"))

	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	client, err := flow.NewClient(t.Context(), nc, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	pub := ceSender{nc: nc, retries: &atomic.Int64{}}
	hookToken := func(runID string) string {
		var tok string
		require.Eventually(t, func() bool {
			s, err := client.Secrets().Snapshot(ctx, runID)
			if err != nil || s.Hooks["cb"] == nil || s.SignalWaits["stop"] == nil {
				return false
			}
			tok = s.Hooks["cb"].Token
			return true
		}, time.Minute, 5*time.Millisecond, "run %s waits", runID)
		return tok
	}
	result := func(runID string) (string, error) {
		var out string
		err := client.Result(ctx, runID, &out)
		return out, err
	}
	// requireEnds checks the runs <p>-signal, <p>-hook and <p>-cancel ended with what was sent
	// over via.
	requireEnds := func(t *testing.T, p, via string) {
		out, err := result(p + "-signal")
		require.NoError(t, err)
		require.Equal(t, "stopped over "+via, out)
		out, err = result(p + "-hook")
		require.NoError(t, err)
		require.Equal(t, "hooked over "+via, out)
		var runErr *flow.RunError
		_, err = result(p + "-cancel")
		require.ErrorAs(t, err, &runErr)
		require.Equal(t, flow.StatusCancelled, runErr.Status)
	}
	web := "http://" + httpAddr

	t.Run("HTTP", func(t *testing.T) {
		for _, id := range []string{"h-signal", "h-hook", "h-cancel"} {
			require.Equal(t, http.StatusCreated, post(t, web+"/v1/workflows/inbox/runs", "application/json", `{"run_id":"`+id+`"}`))
		}
		hookToken("h-signal")
		require.Equal(t, http.StatusAccepted, post(t, web+"/v1/runs/h-signal/signals/stop", "application/json", `"stopped over http"`))
		require.Equal(t, http.StatusAccepted, post(t, web+"/v1/hooks/"+hookToken("h-hook"), "application/json", `"hooked over http"`))
		hookToken("h-cancel")
		require.Equal(t, http.StatusAccepted, post(t, web+"/v1/runs/h-cancel/cancel", "application/json", `{"reason":"over http"}`))
		requireEnds(t, "h", "http")
	})

	t.Run("NATS", func(t *testing.T) {
		for _, id := range []string{"n-signal", "n-hook", "n-cancel"} {
			_, err := pub.send(ctx, api.StartSubject(inboxWorkflow), "start-"+id, nil, map[string]string{api.ExtRunID: id})
			require.NoError(t, err)
		}
		hookToken("n-signal")
		_, err := pub.send(ctx, api.SignalSubject("n-signal", "stop"), "stop-1", "stopped over nats", nil)
		require.NoError(t, err)
		_, err = pub.send(ctx, api.HookSubject(hookToken("n-hook")), "hook-1", "hooked over nats", nil)
		require.NoError(t, err)
		hookToken("n-cancel")
		_, err = pub.send(ctx, api.CancelSubject("n-cancel"), "cancel-1", api.CancelRequest{Reason: "over nats"}, nil)
		require.NoError(t, err)
		requireEnds(t, "n", "nats")
	})

	t.Run("IngressKilledUnderLoad", func(t *testing.T) {
		const runs, perRun, senders = 30, 20, 8
		type job struct{ subject, id, run string }
		var jobs []job
		for r := range runs {
			run := fmt.Sprintf("load-%02d", r)
			jobs = append(jobs, job{api.StartSubject(inboxWorkflow), "start-" + run, run})
			for i := range perRun {
				jobs = append(jobs, job{api.SignalSubject(run, "item"), fmt.Sprintf("%s-item-%02d", run, i), run})
			}
		}
		// Starts first, then the items of all runs interleaved, so that signals go to runs
		// that exist.
		work := make(chan job, len(jobs))
		for _, j := range jobs {
			if strings.HasPrefix(j.id, "start-") {
				_, err := pub.send(ctx, j.subject, j.id, nil, map[string]string{api.ExtRunID: j.run})
				require.NoError(t, err)
			}
		}
		for i := range perRun {
			for r := range runs {
				work <- jobs[r*(perRun+1)+1+i]
			}
		}
		close(work)
		var acked atomic.Int64
		var mu sync.Mutex
		ackedIDs := map[string]string{}
		killAt := int64(runs * perRun / 3)
		killed := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, senders)
		for range senders {
			wg.Go(func() {
				for j := range work {
					if _, err := pub.send(ctx, j.subject, j.id, "item", nil); err != nil {
						errs <- fmt.Errorf("%s: %w", j.id, err)
						return
					}
					mu.Lock()
					ackedIDs[j.id] = j.run
					mu.Unlock()
					if acked.Add(1) == killAt {
						close(killed)
					}
				}
			})
		}
		select {
		case <-killed:
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		in.kill(t) // SIGKILL, mid-load
		restarted := with(roleIngress, "ingress-2")
		restarted.HTTP = httpAddr
		startChild(t, restarted)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, ackedIDs, runs*perRun)
		t.Logf("%d inputs acknowledged; %d requests sent again while the ingress was down", len(ackedIDs), pub.retries.Load())

		for r := range runs {
			run := fmt.Sprintf("load-%02d", r)
			_, err := client.Signal(ctx, run, "stop", "done", nil)
			require.NoError(t, err)
			out, err := result(run)
			require.NoError(t, err)
			require.Equal(t, "done", out)
			hist, err := client.History(ctx, run, 0)
			require.NoError(t, err)
			require.Empty(t, core.Check(run, hist), "run %s passes the invariants checker", run)
			seen := map[string]int{}
			for _, e := range hist {
				if p, ok := e.Payload.(*event.SignalReceived); ok && p.Name == "item" {
					seen[p.DeliveryID]++
				}
			}
			for i := range perRun {
				id := fmt.Sprintf("%s-item-%02d", run, i)
				require.Equal(t, 1, seen[id], "acknowledged input %s is in history exactly once", id)
			}
			require.Len(t, seen, perRun)
		}
	})

	// Every other history passes the checker too.
	for _, run := range []string{"h-signal", "h-hook", "h-cancel", "n-signal", "n-hook", "n-cancel"} {
		hist, err := client.History(ctx, run, 0)
		require.NoError(t, err)
		require.Empty(t, core.Check(run, hist), run)
	}
}
