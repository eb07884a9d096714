package history

import (
	"context"
	"net/http"
	"strings"

	"github.com/flowrun/flow/pkg/flow"
)

// The run page's pause and unpause buttons, forwarded to the ingress like a cancel
// (docs/pause.md).

func (a *uiActions) pause(w http.ResponseWriter, r *http.Request) { a.pauseOrUnpause(w, r, true) }

func (a *uiActions) unpause(w http.ResponseWriter, r *http.Request) { a.pauseOrUnpause(w, r, false) }

func (a *uiActions) pauseOrUnpause(w http.ResponseWriter, r *http.Request, pause bool) {
	req, form, err := readAction(w, r)
	if err != nil {
		a.reply(w, r, form, "", err)
		return
	}
	if a.client == nil {
		a.reply(w, r, form, "", errNoClient)
		return
	}
	opts := &flow.PauseOptions{Reason: strings.TrimSpace(req.Reason), By: "web UI"}
	ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
	defer cancel()
	var runID string
	if pause {
		if opts.Reason == "" {
			opts.Reason = "paused from the web UI"
		}
		runID, err = a.client.PauseRun(ctx, r.PathValue("id"), opts)
	} else {
		runID, err = a.client.UnpauseRun(ctx, r.PathValue("id"), opts)
	}
	a.reply(w, r, form, runID, err)
}
