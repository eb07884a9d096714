package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// uiActions forwards the run page's signal and cancel buttons to the ingress, over NATS
// request/reply with the flow Client (CloudEvents, retried with the same id when unanswered).
type uiActions struct {
	s      *Service
	client *flow.Client
}

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

// maxUIActionBody bounds an action's body.
const maxUIActionBody = 1 << 20

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
	if a.client == nil {
		a.reply(w, r, form, "", errNoClient)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
	defer cancel()
	runID, err := a.client.Signal(ctx, r.PathValue("id"), req.Name, payload, nil)
	a.reply(w, r, form, runID, err)
}

func (a *uiActions) cancel(w http.ResponseWriter, r *http.Request) {
	req, form, err := readAction(w, r)
	if err != nil {
		a.reply(w, r, form, "", err)
		return
	}
	if a.client == nil {
		a.reply(w, r, form, "", errNoClient)
		return
	}
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = "cancelled from the web UI"
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
	defer cancel()
	runID, err := a.client.Cancel(ctx, r.PathValue("id"), reason)
	a.reply(w, r, form, runID, err)
}

// readAction reads a JSON or form body; form says it was a form (answered with a redirect).
func readAction(w http.ResponseWriter, r *http.Request) (uiActionRequest, bool, error) {
	var req uiActionRequest
	r.Body = http.MaxBytesReader(w, r.Body, maxUIActionBody)
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
