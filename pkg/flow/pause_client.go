package flow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/pkg/event"
)

// PauseOptions adjust the pause and unpause calls. The zero value works.
type PauseOptions struct {
	// Reason says why (for a definition or queue, its note); recorded with the pause.
	Reason string
	// By names who asks (an operator, a batch job); recorded with the pause.
	By string
	// RequestID identifies a run's pause or unpause request, so that a retry of it is applied
	// once, even after the run was unpaused (or paused) since. Empty makes a fresh one.
	RequestID string
}

// ScopePause is a paused definition or queue.
type ScopePause = api.ScopePause

// PauseClient pauses and unpauses runs, definitions and task queues, through the ingress
// (docs/pause.md). Get one with [Client.Pauses]; it shares the client's connection and is safe
// for concurrent use.
type PauseClient struct{ t *transport }

// Pauses returns the client's operations on pauses.
func (c *Client) Pauses() PauseClient { return PauseClient{t: c.t} }

// PauseRun pauses run runID (or the latest run it continued as) and returns the ID of the run
// it paused: until UnpauseRun it makes no decision and starts no step attempt, while its
// signals, hook deliveries, updates, cancellation requests and timers are still recorded; an
// attempt already running finishes and its result is recorded. Pausing a paused run is
// accepted without effect. opts may be nil.
func (p PauseClient) PauseRun(ctx context.Context, runID string, opts *PauseOptions) (string, error) {
	return p.run(ctx, api.PauseSubject, "pause", runID, opts)
}

// UnpauseRun ends the pause of run runID (or of the latest run it continued as) and returns the
// ID of that run: the decision that is due is made, held attempts start, and each step that
// exhausted its attempts under ExhaustionPauseRun gets a fresh attempt. Unpausing a run that is not
// paused is accepted without effect. opts may be nil.
func (p PauseClient) UnpauseRun(ctx context.Context, runID string, opts *PauseOptions) (string, error) {
	return p.run(ctx, api.UnpauseSubject, "unpause", runID, opts)
}

func (p PauseClient) run(ctx context.Context, subject func(string) string, kind, runID string, opts *PauseOptions) (string, error) {
	if err := event.ValidateDerivedRunID(runID); err != nil {
		return "", err
	}
	if opts == nil {
		opts = &PauseOptions{}
	}
	body, err := json.Marshal(api.PauseRequest{Reason: opts.Reason, By: opts.By})
	if err != nil {
		return "", err
	}
	id := opts.RequestID
	if id == "" {
		id = nuid.Next()
	}
	resp, err := p.t.input(ctx, subject(runID), kind, id, body, nil)
	if err != nil {
		return "", err
	}
	return resp.RunID, nil
}

// PauseDefinition pauses every run of definition: workers make no decision and start no step
// attempt of them until UnpauseDefinition, while the runs keep recording inputs and timers.
// Pausing it again replaces the note. opts may be nil.
func (p PauseClient) PauseDefinition(ctx context.Context, definition string, opts *PauseOptions) (*ScopePause, error) {
	return p.pauseScope(ctx, "definition", definition, opts)
}

// UnpauseDefinition ends the pause of definition, and reports whether it was paused. The runs
// it held are dispatched again. opts may be nil.
func (p PauseClient) UnpauseDefinition(ctx context.Context, definition string, opts *PauseOptions) (bool, error) {
	return p.unpauseScope(ctx, "definition", definition, opts)
}

// PauseQueue pauses every run on task queue queue, as PauseDefinition does a definition's.
func (p PauseClient) PauseQueue(ctx context.Context, queue string, opts *PauseOptions) (*ScopePause, error) {
	return p.pauseScope(ctx, "queue", queue, opts)
}

// UnpauseQueue ends the pause of queue, as UnpauseDefinition does a definition's.
func (p PauseClient) UnpauseQueue(ctx context.Context, queue string, opts *PauseOptions) (bool, error) {
	return p.unpauseScope(ctx, "queue", queue, opts)
}

// List lists the paused definitions and queues.
func (p PauseClient) List(ctx context.Context) ([]ScopePause, error) {
	resp, err := p.scope(ctx, api.SubjectPausesList, nil)
	if err != nil {
		return nil, err
	}
	return resp.Pauses, nil
}

func (p PauseClient) pauseScope(ctx context.Context, scope, name string, opts *PauseOptions) (*ScopePause, error) {
	if err := event.ValidateName(scope, name); err != nil {
		return nil, err
	}
	resp, err := p.scope(ctx, api.PauseScopeSubject("pause", scope, name), opts)
	if err != nil {
		return nil, err
	}
	if len(resp.Pauses) != 1 {
		return nil, fmt.Errorf("flow: the ingress answered the pause of %s %q with %d pauses", scope, name, len(resp.Pauses))
	}
	return &resp.Pauses[0], nil
}

func (p PauseClient) unpauseScope(ctx context.Context, scope, name string, opts *PauseOptions) (bool, error) {
	if err := event.ValidateName(scope, name); err != nil {
		return false, err
	}
	resp, err := p.scope(ctx, api.PauseScopeSubject("unpause", scope, name), opts)
	if err != nil {
		return false, err
	}
	return resp.Found, nil
}

// scope asks the ingress for a definition or queue pause, unpause or list, as plain JSON. Each
// is idempotent, so an unanswered request is retried as is.
func (p PauseClient) scope(ctx context.Context, subject string, opts *PauseOptions) (*api.PausesResponse, error) {
	var req api.PauseRequest
	if opts != nil {
		req = api.PauseRequest{Reason: opts.Reason, By: opts.By}
	}
	var resp api.PausesResponse
	c := call{to: ingress, subject: subject, header: nats.Header{"Content-Type": []string{"application/json"}}, retry: true}
	if err := p.t.json(ctx, c, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
