package webui

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/flowrun/flow/internal/api"
)

// The run page's pause and unpause buttons, forwarded to the ingress's HTTP API like a cancel
// (docs/pause.md).

func (a *uiActions) pause(w http.ResponseWriter, r *http.Request) { a.pauseOrUnpause(w, r, true) }

func (a *uiActions) unpause(w http.ResponseWriter, r *http.Request) { a.pauseOrUnpause(w, r, false) }

func (a *uiActions) pauseOrUnpause(w http.ResponseWriter, r *http.Request, pause bool) {
	req, form, err := readAction(w, r)
	if err != nil {
		a.reply(w, r, form, "", err)
		return
	}
	body := api.PauseRequest{Reason: strings.TrimSpace(req.Reason), By: "web UI"}
	kind := "unpause"
	if pause {
		kind = "pause"
		if body.Reason == "" {
			body.Reason = "paused from the web UI"
		}
	}
	b, _ := json.Marshal(body)
	runID, err := a.forward(r, runPath(r.PathValue("id"), kind), b)
	a.reply(w, r, form, runID, err)
}
