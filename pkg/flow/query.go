package flow

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// RunDescription is what the history service knows of a run: its snapshot (at a sequence, or
// the latest), its index entry, and its last sequence. It decodes the history service's answer
// (api.GetResponse) field for field.
type RunDescription struct {
	// Snapshot is the run's snapshot at the sequence asked for, or the latest.
	Snapshot *Snapshot `json:"snapshot"`
	// Entry is the run's runs index entry (with why it is parked, if it is).
	Entry *RunSummary `json:"entry,omitempty"`
	// Last is the run's last sequence: Snapshot.Seq unless an earlier one was asked for.
	Last uint64 `json:"last"`
	// StepWaits lists the attempts in flight that wait for a slot of their step's limit
	// (LimitStep), with why; only for the latest snapshot.
	StepWaits []StepWait `json:"step_waits,omitempty"`
	// Damage is set for a run whose stored history is damaged: Snapshot then projects the
	// history's longest valid prefix, which ends at Damage.ValidThrough (and Last).
	Damage *RunDamage `json:"damage,omitempty"`
}

// StepWait is an attempt in flight waiting for a slot of its step's limit.
type StepWait struct {
	// StepID is the step's ID, Name its registered step function and Attempt the attempt that
	// waits.
	StepID  string `json:"step_id"`
	Name    string `json:"name"`
	Attempt int    `json:"attempt"`
	// Why says what keeps the attempt waiting.
	Why string `json:"why"`
	// Since is when the attempt first found no slot.
	Since time.Time `json:"since"`
}

// RunDamage is RunDescription.Damage: why a run's history is damaged, and how far it is valid.
type RunDamage struct {
	// Reason says what was found damaged in the run's history.
	Reason string `json:"reason"`
	// ValidThrough is the last sequence of the history's longest valid prefix.
	ValidThrough uint64 `json:"valid_through"`
	// Quarantined is set when the run is quarantined: no worker drives it until an operator
	// releases it (flow resume RUN --accept-damage, or flow terminate RUN).
	Quarantined bool `json:"quarantined"`
}

// Snapshot returns the projection of run runID's latest history, its hook tokens redacted
// (secrets.go: Secrets().Snapshot reveals them to an operator). An unknown run is an error
// wrapping ErrNotFound, a run whose history is damaged one wrapping ErrDamaged (Describe shows
// what of it is valid).
func (c *Client) Snapshot(ctx context.Context, runID string) (*Snapshot, error) {
	return c.SnapshotAt(ctx, runID, 0)
}

// SnapshotAt returns the projection of run runID's history up to sequence seq: the run as it
// was right after that event (time travel). seq 0 means the latest. Errors are Snapshot's.
func (c *Client) SnapshotAt(ctx context.Context, runID string, seq uint64) (*Snapshot, error) {
	d, err := c.Describe(ctx, runID, seq)
	if err != nil {
		return nil, err
	}
	if d.Damage != nil {
		return nil, fmt.Errorf("%w: the history of run %q is damaged (%s); it is valid through seq %d: "+
			"after checking it, accept the damage with `flow resume %s --accept-damage`, or end it with `flow terminate %s`",
			ErrDamaged, runID, d.Damage.Reason, d.Damage.ValidThrough, runID, runID)
	}
	return d.Snapshot, nil
}

// Describe returns run runID's snapshot up to sequence at (0: the latest) with its index entry,
// as the history service answers them. A run whose history is damaged is described as far as
// its history is valid, with Damage saying why the rest is not.
func (c *Client) Describe(ctx context.Context, runID string, at uint64) (*RunDescription, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	var resp RunDescription
	if err := c.query(ctx, api.SubjectGet, api.GetRequest{RunID: runID, At: at, AtLeast: c.seen.get(runID)}, &resp); err != nil {
		return nil, err
	}
	c.seen.note(runID, resp.Last)
	return &resp, nil
}

// History returns run runID's events after sequence after (0 for all), in order, reading them
// page by page from the history service, the run's seed and hook tokens redacted
// (Secrets().History reveals them to an operator).
func (c *Client) History(ctx context.Context, runID string, after uint64) ([]event.Envelope, error) {
	return c.history(ctx, api.SubjectHistory, runID, after)
}

// history reads run runID's events after sequence after from the endpoint subject.
func (c *Client) history(ctx context.Context, subject, runID string, after uint64) ([]event.Envelope, error) {
	var all []event.Envelope
	for {
		page, more, err := c.historyPage(ctx, subject, runID, after, api.MaxHistoryLimit)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if !more || len(page) == 0 {
			return all, nil
		}
		after = page[len(page)-1].Seq
	}
}

// HistoryPage returns at most limit of run runID's events after sequence after (limit 0 means
// api.DefaultHistoryLimit), and whether more follow.
func (c *Client) HistoryPage(ctx context.Context, runID string, after uint64, limit int) ([]event.Envelope, bool, error) {
	return c.historyPage(ctx, api.SubjectHistory, runID, after, limit)
}

func (c *Client) historyPage(ctx context.Context, subject, runID string, after uint64, limit int) ([]event.Envelope, bool, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, false, err
	}
	var resp api.HistoryResponse
	req := api.HistoryRequest{RunID: runID, After: after, Limit: limit, AtLeast: c.seen.get(runID)}
	if err := c.query(ctx, subject, req, &resp); err != nil {
		return nil, false, err
	}
	if n := len(resp.Events); n > 0 {
		c.seen.note(runID, resp.Events[n-1].Seq)
	}
	return resp.Events, resp.More, nil
}

// RunsFilter selects and pages runs for [Client.Runs]. The zero value lists the most recently
// updated runs.
type RunsFilter = api.ListRequest

// RunsPage is one page of a listing; Next continues it.
type RunsPage = api.ListResponse

// Runs returns one page of the runs index that f selects (nil: every run), most recently
// updated first; pass page.Next as f.Cursor for the next page.
func (c *Client) Runs(ctx context.Context, f *RunsFilter) (*RunsPage, error) {
	if f == nil {
		f = &RunsFilter{}
	}
	var resp api.ListResponse
	if err := c.query(ctx, api.SubjectList, f, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// ResumeOptions adjust [Client.Resume]. The zero value works.
type ResumeOptions struct {
	// AcceptDamage releases a run quarantined because its history was found damaged, after you
	// checked it: it is driven from what its history holds, and events it lost are not redone
	// unless its code decides them again.
	AcceptDamage bool
}

// ResumeResult says what [Client.Resume] did.
type ResumeResult = api.ResumeResponse

// Resume dispatches run runID to a worker again: a run parked because no worker could drive it
// (blocked, or waiting for a worker of its build or definition), or one you just fixed. opts
// may be nil.
func (c *Client) Resume(ctx context.Context, runID string, opts *ResumeOptions) (*ResumeResult, error) {
	if opts == nil {
		opts = &ResumeOptions{}
	}
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return nil, err
	}
	var resp api.ResumeResponse
	if err := c.query(ctx, api.SubjectResume, api.ResumeRequest{RunID: runID, AcceptDamage: opts.AcceptDamage}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// seenSeqs remembers the last sequence a client was shown per run, for its later reads. It is
// bounded: the oldest runs are forgotten.
type seenSeqs struct {
	mu sync.Mutex
	m  map[string]uint64
}

const maxSeen = 10_000

func (s *seenSeqs) note(runID string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]uint64{}
	}
	if len(s.m) >= maxSeen {
		for k := range s.m {
			delete(s.m, k)
			if len(s.m) < maxSeen*9/10 {
				break
			}
		}
	}
	s.m[runID] = max(s.m[runID], seq)
}

func (s *seenSeqs) get(runID string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[runID]
}
