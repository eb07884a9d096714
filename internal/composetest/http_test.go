package composetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// httpAPI talks to the stack's ingress and history service over their published HTTP ports.
type httpAPI struct {
	s       *stack
	client  *http.Client
	retries atomic.Int64
}

func newHTTP(s *stack) *httpAPI {
	return &httpAPI{s: s, client: &http.Client{Timeout: 15 * time.Second}}
}

// errRetry marks an answer worth sending again: the input was not committed.
type errRetry struct{ error }

// do sends a request and decodes a 2xx answer's JSON into out. A transport error, a 5xx, or an
// answer that retry (if not nil) accepts, is an errRetry.
func (h *httpAPI) do(ctx context.Context, method, url string, header http.Header, body, out any, retry func(status int, code api.IngressCode) bool) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return errRetry{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return errRetry{err}
	}
	if resp.StatusCode/100 == 2 {
		if out == nil {
			return nil
		}
		return json.Unmarshal(b, out)
	}
	err = fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	var e struct {
		Code api.IngressCode `json:"code"`
	}
	_ = json.Unmarshal(b, &e)
	if resp.StatusCode >= 500 || retry != nil && retry(resp.StatusCode, e.Code) {
		return errRetry{err}
	}
	return err
}

// untilDone calls fn until it returns nil or an error that is not an errRetry, or ctx ends.
func (h *httpAPI) untilDone(ctx context.Context, what string, fn func() error) error {
	var last error
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if _, ok := err.(errRetry); !ok {
			return fmt.Errorf("%s: %w", what, err)
		}
		last = err
		h.retries.Add(1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last answer: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (h *httpAPI) auth() http.Header {
	return http.Header{"Authorization": {"Bearer " + h.s.token}}
}

// start starts j's run, retrying (with the same run ID, which makes it idempotent) while the
// stack recovers: no answer, a 5xx, or no_worker while the killed worker's entry lingers.
func (h *httpAPI) start(ctx context.Context, j job) error {
	input, err := json.Marshal(j.input)
	if err != nil {
		return err
	}
	return h.untilDone(ctx, "starting "+j.id, func() error {
		var resp api.InputResponse
		err := h.do(ctx, http.MethodPost, h.s.ingress+"/v1/workflows/"+j.definition+"/runs", h.auth(),
			api.StartRequest{RunID: j.id, Input: input}, &resp,
			func(_ int, code api.IngressCode) bool { return code == api.CodeNoWorker })
		if err == nil && resp.RunID != j.id {
			return fmt.Errorf("the ingress started run %q, not %q", resp.RunID, j.id)
		}
		return err
	})
}

// signal sends signal name to run, with an Idempotency-Key so that a retry is applied once.
func (h *httpAPI) signal(ctx context.Context, run, name string, payload any) error {
	header := h.auth()
	header.Set("Idempotency-Key", run+"-"+name)
	return h.untilDone(ctx, "signalling "+run, func() error {
		return h.do(ctx, http.MethodPost, h.s.ingress+"/v1/runs/"+run+"/signals/"+name, header, payload, nil, nil)
	})
}

// snapshot returns run's snapshot from the history service, or an errRetry while it does not
// know the run.
func (h *httpAPI) snapshot(ctx context.Context, run string) (*core.Snapshot, error) {
	var resp api.GetResponse
	err := h.do(ctx, http.MethodGet, h.s.history+"/v1/runs/"+run, h.auth(), nil, &resp,
		func(status int, _ api.IngressCode) bool { return status == http.StatusNotFound })
	if err != nil {
		return nil, err
	}
	return resp.Snapshot, nil
}

// awaitEnded polls the history service until every run in ids has ended, and returns their
// snapshots.
func (h *httpAPI) awaitEnded(ctx context.Context, t *testing.T, ids []string) map[string]*core.Snapshot {
	t.Helper()
	ended := map[string]*core.Snapshot{}
	pending := map[string]string{} // run -> what was last seen
	for _, id := range ids {
		pending[id] = "not polled"
	}
	for len(pending) > 0 {
		for id := range pending {
			snap, err := h.snapshot(ctx, id)
			switch {
			case err != nil:
				if _, ok := err.(errRetry); !ok {
					require.NoError(t, err)
				}
				pending[id] = err.Error()
			case snap.Status.Terminal():
				ended[id] = snap
				delete(pending, id)
			default:
				pending[id] = fmt.Sprintf("%s at seq %d", snap.Status, snap.Seq)
			}
		}
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			n := 0
			for id, seen := range pending {
				if n++; n > 10 {
					break
				}
				t.Logf("run %s has not ended: %s", id, seen)
				dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if hist, err := h.history(dctx, id); err == nil {
					for _, e := range hist {
						b, _ := json.Marshal(e)
						t.Logf("  %s", b)
					}
				}
				cancel()
			}
			t.Fatalf("%d of %d runs did not end: %v", len(pending), len(ids), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	return ended
}

// history returns run's whole history from the history service, page after page.
func (h *httpAPI) history(ctx context.Context, run string) ([]event.Envelope, error) {
	var all []event.Envelope
	var after uint64
	for {
		var page api.HistoryResponse
		url := h.s.history + "/v1/runs/" + run + "/history?limit=1000&after=" + strconv.FormatUint(after, 10)
		if err := h.untilDone(ctx, "reading the history of "+run, func() error {
			return h.do(ctx, http.MethodGet, url, h.auth(), nil, &page, nil)
		}); err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if !page.More || len(page.Events) == 0 {
			return all, nil
		}
		after = page.Events[len(page.Events)-1].Seq
	}
}
