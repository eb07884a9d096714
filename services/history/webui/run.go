package webui

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// uiTimelineWindow bounds the timeline rows a run page shows around the chosen sequence.
const uiTimelineWindow = 400

// uiRunPage is the data of a run page: the snapshot at At, the latest status, the timeline.
type uiRunPage struct {
	RunID string
	// At is the sequence shown; Last the run's latest. Following is set when the page shows the
	// latest and moves on with the run.
	At, Last  uint64
	Following bool
	Snap      *core.Snapshot
	// AtEvent is the event at At.
	AtEvent uiEvent
	// Latest is the run's status now (the actions act on the run now, not at At).
	Latest         core.Status
	LatestTerminal bool
	Entry          *core.Summary
	Diagnosis      *uiDiagnosis
	// LatestDiagnosis is the diagnosis of the run now, when it is blocked and At is earlier.
	LatestDiagnosis *uiDiagnosis

	Steps       []*core.Step
	Pending     []*core.Step
	Waits       []*core.Wait
	SignalWaits []uiSignalWait
	Signals     []*core.Signal
	Hooks       []*core.Hook
	Children    []*core.Child

	Timeline []uiEvent
	// Earlier and Later count the events the timeline leaves out around its window.
	Earlier, Later uint64
	// SuggestSignal is the name of a signal the run waits for now, to fill the signal form.
	SuggestSignal string
	// Redacted is set when the run's secrets (hook tokens, seed) are redacted on the page.
	Redacted bool
	// ActionsOff says why the page offers no actions (FLOW_HISTORY_INGRESS_URL=off); "" when
	// it does.
	ActionsOff string
	// Notice and FlashError report the outcome of a form posted without the script.
	Notice, FlashError string
	// Types are the event types, for the live view's listeners.
	Types []event.Type
	Now   time.Time
	// Updates are the run's updates, in the order received.
	Updates []*core.Update
	// StepWaits are the attempts in flight waiting for a slot of their step's limit, now.
	StepWaits []api.StepWait
}

// uiSignalWait is a signal wait with the signal bound to it.
type uiSignalWait struct {
	*core.SignalWait
	Bound *core.Signal
}

// uiRun serves a run page, or its view alone with ?fragment=view.
// The run's seed and hook tokens are redacted (Reader.RunHistory) unless a full caller asks for
// them with ?reveal=secrets.
func (s *UI) uiRun(w http.ResponseWriter, r *http.Request) {
	page, secrets, err := s.uiRunData(r)
	if err != nil {
		s.uiQueryError(w, err)
		return
	}
	name := "run.html"
	if r.URL.Query().Get("fragment") == "view" {
		name = "run-view"
	}
	s.uiRenderScrubbed(w, http.StatusOK, name, page, secrets)
}

// uiRunData returns the run page's data, and the secrets to scrub from it (none when revealed).
func (s *UI) uiRunData(r *http.Request) (p *uiRunPage, secrets []string, err error) {
	runID := r.PathValue("id")
	at, err := uiSeq(r)
	if err != nil {
		return nil, nil, err
	}
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, nil, &api.Error{Code: api.CodeInvalid, Message: err.Error()}
	}
	revealed, err := s.auth.Reveal(r)
	if err != nil {
		return nil, nil, err
	}
	hist, secrets, err := s.reader.RunHistory(r.Context(), runID, revealed)
	if err != nil {
		return nil, nil, err
	}
	last := hist[len(hist)-1].Seq
	if at > last {
		return nil, nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("at=%d is past the end: run %q has %d events; pick a sequence from 1 to %d", at, runID, last, last)}
	}
	p = &uiRunPage{RunID: runID, At: at, Last: last, Following: at == 0, Types: event.Types(), Now: time.Now().UTC()}
	if at == 0 {
		p.At = last
	}
	latest, err := core.Project(runID, hist)
	if err != nil {
		return nil, nil, &api.Error{Code: api.CodeDamaged, Message: fmt.Sprintf("the history of run %q does not project: %v", runID, err)}
	}
	p.Snap = latest
	if p.At < last {
		if p.Snap, err = core.Project(runID, hist[:p.At]); err != nil {
			return nil, nil, err
		}
	}
	p.Latest, p.LatestTerminal = latest.Status, latest.Terminal()
	for _, sw := range latest.SignalWaits {
		if !sw.Received() && (p.SuggestSignal == "" || sw.Name < p.SuggestSignal) {
			p.SuggestSignal = sw.Name
		}
	}
	p.Redacted = !revealed
	if s.ingress == nil {
		p.ActionsOff = errActionsOff.msg
	}
	p.Notice, p.FlashError = clip(r.URL.Query().Get("notice"), 200), clip(r.URL.Query().Get("error"), 500)
	if entry, ok := s.reader.Entry(runID); ok {
		p.Entry = &entry
	}
	if p.Following {
		p.StepWaits = s.reader.StepWaits(r.Context(), latest)
	}
	p.Diagnosis = diagnose(p.Snap.Blocked)
	if p.At < last && latest.Blocked != nil {
		p.LatestDiagnosis = diagnose(latest.Blocked)
	}
	p.fill(hist)
	return p, secrets, nil
}

// fill sorts the snapshot's parts and builds the timeline around At.
func (p *uiRunPage) fill(hist []event.Envelope) {
	snap := p.Snap
	for _, st := range snap.Steps {
		p.Steps = append(p.Steps, st)
	}
	slices.SortFunc(p.Steps, func(a, b *core.Step) int {
		return cmp.Or(cmp.Compare(a.BatchSeq, b.BatchSeq), cmp.Compare(a.Position(), b.Position()), cmp.Compare(a.ID, b.ID))
	})
	for _, st := range p.Steps {
		if !st.Status.Settled() {
			p.Pending = append(p.Pending, st)
		}
	}
	for _, wt := range snap.Waits {
		p.Waits = append(p.Waits, wt)
	}
	slices.SortFunc(p.Waits, func(a, b *core.Wait) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	for _, sw := range snap.SignalWaits {
		u := uiSignalWait{SignalWait: sw}
		if sw.Received() && sw.Signal < len(snap.Signals) {
			u.Bound = snap.Signals[sw.Signal]
		}
		p.SignalWaits = append(p.SignalWaits, u)
	}
	slices.SortFunc(p.SignalWaits, func(a, b uiSignalWait) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	p.Signals = snap.Signals
	for _, h := range snap.Hooks {
		p.Hooks = append(p.Hooks, h)
	}
	slices.SortFunc(p.Hooks, func(a, b *core.Hook) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	for _, c := range snap.Children {
		p.Children = append(p.Children, c)
	}
	p.Updates = snap.UpdateList()
	slices.SortFunc(p.Children, func(a, b *core.Child) int {
		return cmp.Or(cmp.Compare(a.BatchSeq, b.BatchSeq), cmp.Compare(a.ID, b.ID))
	})

	from, to := timelineWindow(p.At, p.Last)
	p.Earlier, p.Later = from-1, p.Last-to
	started := hist[0].Time
	for _, e := range hist[from-1 : to] {
		ev := describe(e, started)
		ev.Current, ev.Future = e.Seq == p.At, e.Seq > p.At
		p.Timeline = append(p.Timeline, ev)
	}
	p.AtEvent = describe(hist[p.At-1], started)
}

// timelineWindow returns the first and last sequences the timeline shows: all of them, or
// uiTimelineWindow around at.
func timelineWindow(at, last uint64) (from, to uint64) {
	if last <= uiTimelineWindow {
		return 1, last
	}
	from = 1
	if half := uint64(uiTimelineWindow / 2); at > half {
		from = at - half
	}
	from = min(from, last-uiTimelineWindow+1)
	return from, from + uiTimelineWindow - 1
}
