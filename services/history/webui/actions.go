package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// uiActions forwards the run page's signal, cancel, pause and unpause buttons to the ingress's
// HTTP API (Config.IngressURL) with the caller's bearer token, so that the ingress authorizes
// the caller: a read-only token, which the ingress does not know, cannot act through the UI.
type uiActions struct {
	s *UI
	// ingress returns the ingress's base URL; "" when the actions are off.
	ingress func() string
	http    *http.Client
}

// errActionsOff is returned by actions when Config.IngressURL is "off".
var errActionsOff = &actionError{status: http.StatusServiceUnavailable, code: "unavailable",
	msg: "the web UI's actions are off: set FLOW_HISTORY_INGRESS_URL to the ingress's HTTP address (such as http://127.0.0.1:8421) on the history service"}

// forward POSTs body (JSON) to the ingress's path with the caller's token, and returns the run
// that received the input, or the ingress's error (*api.IngressError) or why it did not answer.
func (a *uiActions) forward(r *http.Request, path string, body []byte) (string, error) {
	base := strings.TrimRight(a.ingress(), "/")
	if base == "" {
		return "", errActionsOff
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if t := a.s.auth.Token(r); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("the ingress at %s did not answer in %s: %w", base, uiActionTimeout, context.DeadlineExceeded)
		}
		return "", &actionError{status: http.StatusBadGateway, code: "unavailable", msg: fmt.Sprintf("the ingress at %s (FLOW_HISTORY_INGRESS_URL) does not answer: %v", base, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", &actionError{status: http.StatusBadGateway, code: "unavailable", msg: fmt.Sprintf("reading the ingress's answer: %v", err)}
	}
	if resp.StatusCode/100 == 2 {
		var ok api.InputResponse
		if err := json.Unmarshal(b, &ok); err != nil {
			return "", &actionError{status: http.StatusBadGateway, code: "internal", msg: fmt.Sprintf("the ingress's answer is not JSON: %v", err)}
		}
		return ok.RunID, nil
	}
	var ie api.IngressError
	if err := json.Unmarshal(b, &ie); err != nil || ie.Code == "" {
		return "", &actionError{status: http.StatusBadGateway, code: "internal", msg: fmt.Sprintf("the ingress answered %s", resp.Status)}
	}
	return "", &actionError{status: resp.StatusCode, code: string(ie.Code), msg: ie.Message}
}

// runPath is the ingress's path of run runID's input kind ("cancel", "signals/NAME", ...).
func runPath(runID, kind string) string { return "/v1/runs/" + url.PathEscape(runID) + "/" + kind }

// uiActionRequest is the body of a signal or cancel: JSON, or a form with the same fields.
type uiActionRequest struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload"`
	Reason  string          `json:"reason"`
}

// uiActionReply answers an action: the run that received it, or an error with the ingress's
// code and message.
type uiActionReply struct {
	RunID string         `json:"run_id,omitempty"`
	Error *uiActionError `json:"error,omitempty"`
}

type uiActionError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// MaxActionBody bounds the body of an action (and of the form the service reads its CSRF token
// from).
const MaxActionBody = 1 << 20

func (a *uiActions) signal(w http.ResponseWriter, r *http.Request) {
	req, form, err := readAction(w, r)
	if err != nil {
		a.reply(w, r, form, "", err)
		return
	}
	req.Name = strings.TrimSpace(req.Name)
	if req.Name == "" {
		a.reply(w, r, form, "", &actionError{status: http.StatusBadRequest, code: "invalid_name", msg: "name the signal to send (for the approval example: approve)"})
		return
	}
	payload := json.RawMessage("null")
	if p := strings.TrimSpace(string(req.Payload)); p != "" {
		if !json.Valid([]byte(p)) {
			a.reply(w, r, form, "", &actionError{status: http.StatusBadRequest, code: "invalid_json", msg: "the payload is not JSON; write a JSON value such as {\"note\":\"ok\"}, or leave it empty for null"})
			return
		}
		payload = json.RawMessage(p)
	}
	if err := event.ValidateName("signal", req.Name); err != nil {
		a.reply(w, r, form, "", &actionError{status: http.StatusBadRequest, code: "invalid_name", msg: err.Error()})
		return
	}
	runID, err := a.forward(r, runPath(r.PathValue("id"), "signals/"+url.PathEscape(req.Name)), payload)
	a.reply(w, r, form, runID, err)
}

func (a *uiActions) cancel(w http.ResponseWriter, r *http.Request) {
	req, form, err := readAction(w, r)
	if err != nil {
		a.reply(w, r, form, "", err)
		return
	}
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = "cancelled from the web UI"
	}
	body, _ := json.Marshal(api.CancelRequest{Reason: reason})
	runID, err := a.forward(r, runPath(r.PathValue("id"), "cancel"), body)
	a.reply(w, r, form, runID, err)
}

// readAction reads a JSON or form body; form says it was a form (answered with a redirect).
func readAction(w http.ResponseWriter, r *http.Request) (uiActionRequest, bool, error) {
	var req uiActionRequest
	r.Body = http.MaxBytesReader(w, r.Body, MaxActionBody)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return req, false, &actionError{status: http.StatusBadRequest, code: "invalid_json", msg: "the body is not a JSON object {\"name\", \"payload\", \"reason\"}: " + err.Error()}
		}
		return req, false, nil
	case "application/x-www-form-urlencoded", "multipart/form-data":
		if err := r.ParseForm(); err != nil {
			return req, true, &actionError{status: http.StatusBadRequest, code: "invalid_request", msg: "the form does not read: " + err.Error()}
		}
		req.Name, req.Reason = r.PostForm.Get("name"), r.PostForm.Get("reason")
		req.Payload = json.RawMessage(r.PostForm.Get("payload"))
		return req, true, nil
	}
	return req, false, &actionError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
		msg: fmt.Sprintf("Content-Type %q is neither application/json nor a form", r.Header.Get("Content-Type"))}
}

// actionError is an action refused before it reaches the ingress.
type actionError struct {
	status int
	code   string
	msg    string
}

func (e *actionError) Error() string { return e.msg }

// reply answers an action: JSON for the script, a redirect to the run page for a form.
func (a *uiActions) reply(w http.ResponseWriter, r *http.Request, form bool, runID string, err error) {
	status, rep := http.StatusOK, uiActionReply{RunID: runID}
	if err != nil {
		var code string
		status, code = actionStatus(err)
		rep = uiActionReply{Error: &uiActionError{Code: code, Message: strings.TrimPrefix(err.Error(), "flow: ")}}
	}
	if form {
		q := url.Values{}
		if rep.Error != nil {
			q.Set("error", rep.Error.Message)
		} else {
			q.Set("notice", "sent")
		}
		http.Redirect(w, r, "/ui/runs/"+url.PathEscape(r.PathValue("id"))+"?"+q.Encode(), http.StatusSeeOther)
		return
	}
	writeJSON(w, status, rep)
}

// actionStatus maps an action's error to an HTTP status and the ingress's error code.
func actionStatus(err error) (int, string) {
	var ae *actionError
	var ie *api.IngressError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code
	case errors.As(err, &ie):
		return ie.HTTPStatus(), string(ie.Code)
	case errors.Is(err, event.ErrInvalidID):
		return http.StatusBadRequest, "invalid_name"
	}
	for _, m := range []struct {
		target error
		status int
		code   string
	}{
		{flow.ErrTerminal, http.StatusConflict, "run_ended"},
		{flow.ErrNotFound, http.StatusNotFound, "run_not_found"},
		{flow.ErrDeliveryConflict, http.StatusConflict, "delivery_conflict"},
		{flow.ErrDamaged, http.StatusLocked, "run_damaged"},
		{flow.ErrInvalidInput, http.StatusBadRequest, "invalid_request"},
		{flow.ErrIngressUnavailable, http.StatusServiceUnavailable, "unavailable"},
		{context.DeadlineExceeded, http.StatusGatewayTimeout, "timeout"},
	} {
		if errors.Is(err, m.target) {
			return m.status, m.code
		}
	}
	if errors.Is(err, errNoClient) {
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusBadGateway, "internal"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
