package history

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// The web UI's batch jobs (docs/batch.md), read through the ingress as `flow batch` reads them:
//
//	GET /ui/batches        the jobs, the latest first, with their progress
//	GET /ui/batches/{id}   a job's report: its counts, skipped runs by reason, failures
type uiBatches struct {
	s      *Service
	client *flow.Client
}

type uiBatchesPage struct {
	Jobs  []flow.BatchJob
	Now   time.Time
	Error string
}

type uiBatchPage struct {
	Job     *flow.BatchJob
	Now     time.Time
	Reasons []uiSkipReason
}

type uiSkipReason struct {
	Reason string
	Count  int
	Runs   []string
}

func (b *uiBatches) list(w http.ResponseWriter, r *http.Request) {
	page := uiBatchesPage{Now: time.Now().UTC()}
	if b.client == nil {
		page.Error = "the web UI has no client to read batch jobs with"
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
		defer cancel()
		jobs, err := b.client.Batches().List(ctx, &flow.BatchListOptions{Limit: 200})
		if err != nil {
			page.Error = err.Error()
		}
		page.Jobs = jobs
	}
	b.s.uiRender(w, http.StatusOK, "batches.html", page)
}

func (b *uiBatches) job(w http.ResponseWriter, r *http.Request) {
	if b.client == nil {
		b.s.uiError(w, http.StatusServiceUnavailable, "No client", "the web UI has no client to read batch jobs with")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
	defer cancel()
	j, err := b.client.Batches().Get(ctx, r.PathValue("id"))
	switch {
	case errors.Is(err, flow.ErrBatchNotFound):
		b.s.uiError(w, http.StatusNotFound, "Batch job not found", err.Error())
		return
	case err != nil:
		b.s.uiError(w, http.StatusBadGateway, "Cannot read the batch job", err.Error())
		return
	}
	page := uiBatchPage{Job: j, Now: time.Now().UTC()}
	for reason, n := range j.Skipped {
		sr := uiSkipReason{Reason: reason, Count: n}
		for _, note := range j.Skips {
			if note.Reason == reason {
				sr.Runs = append(sr.Runs, note.RunID)
			}
		}
		page.Reasons = append(page.Reasons, sr)
	}
	slices.SortFunc(page.Reasons, func(a, b uiSkipReason) int { return b.Count - a.Count })
	b.s.uiRender(w, http.StatusOK, "batch.html", page)
}
