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

// PauseRun pauses run runID (or the latest run it continued as) and returns the ID of the run
// it paused: until UnpauseRun it makes no decision and starts no step attempt, while its
// signals, hook deliveries, updates, cancellation requests and timers are still recorded; an
// attempt already running finishes and its result is recorded. Pausing a paused run is
// accepted without effect. See docs/pause.md.
func (c *Client) PauseRun(ctx context.Context, runID string, opts *PauseOptions) (string, error) {
	return c.pauseInput(ctx, api.PauseSubject, "pause", runID, opts)
}

// UnpauseRun ends the pause of run runID (or of the latest run it continued as) and returns the
// ID of that run: the decision that is due is made, held attempts start, and each step that
// exhausted its attempts under PauseRun gets a fresh attempt. Unpausing a run that is not
// paused is accepted without effect.
func (c *Client) UnpauseRun(ctx context.Context, runID string, opts *PauseOptions) (string, error) {
	return c.pauseInput(ctx, api.UnpauseSubject, "unpause", runID, opts)
}

func (c *Client) pauseInput(ctx context.Context, subject func(string) string, kind, runID string, opts *PauseOptions) (string, error) {
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
	resp, err := c.t.input(ctx, subject(runID), kind, id, body, nil)
	if err != nil {
		return "", err
	}
	return resp.RunID, nil
}

// PauseDefinition pauses every run of definition: workers make no decision and start no step
// attempt of them until UnpauseDefinition, while the runs keep recording inputs and timers.
// Pausing it again replaces the note.
func (c *Client) PauseDefinition(ctx context.Context, definition string, opts *PauseOptions) (*ScopePause, error) {
	return c.pauseScope(ctx, "definition", definition, opts)
}

// UnpauseDefinition ends the pause of definition, and reports whether it was paused. The runs
// it held are dispatched again.
func (c *Client) UnpauseDefinition(ctx context.Context, definition string, opts *PauseOptions) (bool, error) {
	return c.unpauseScope(ctx, "definition", definition, opts)
}

// PauseQueue pauses every run on task queue queue, as PauseDefinition does a definition's.
func (c *Client) PauseQueue(ctx context.Context, queue string, opts *PauseOptions) (*ScopePause, error) {
	return c.pauseScope(ctx, "queue", queue, opts)
}

// UnpauseQueue ends the pause of queue, as UnpauseDefinition does a definition's.
func (c *Client) UnpauseQueue(ctx context.Context, queue string, opts *PauseOptions) (bool, error) {
	return c.unpauseScope(ctx, "queue", queue, opts)
}

// Pauses lists the paused definitions and queues.
func (c *Client) Pauses(ctx context.Context) ([]ScopePause, error) {
	resp, err := c.scopeRequest(ctx, api.SubjectPausesList, nil)
	if err != nil {
		return nil, err
	}
	return resp.Pauses, nil
}

func (c *Client) pauseScope(ctx context.Context, scope, name string, opts *PauseOptions) (*ScopePause, error) {
	if err := event.ValidateName(scope, name); err != nil {
		return nil, err
	}
	resp, err := c.scopeRequest(ctx, api.PauseScopeSubject("pause", scope, name), opts)
	if err != nil {
		return nil, err
	}
	if len(resp.Pauses) != 1 {
		return nil, fmt.Errorf("flow: the ingress answered the pause of %s %q with %d pauses", scope, name, len(resp.Pauses))
	}
	return &resp.Pauses[0], nil
}

func (c *Client) unpauseScope(ctx context.Context, scope, name string, opts *PauseOptions) (bool, error) {
	if err := event.ValidateName(scope, name); err != nil {
		return false, err
	}
	resp, err := c.scopeRequest(ctx, api.PauseScopeSubject("unpause", scope, name), opts)
	if err != nil {
		return false, err
	}
	return resp.Found, nil
}

// scopeRequest asks the ingress for a definition or queue pause, unpause or list, as plain JSON.
// Each is idempotent, so an unanswered request is retried as is.
func (c *Client) scopeRequest(ctx context.Context, subject string, opts *PauseOptions) (*api.PausesResponse, error) {
	var req api.PauseRequest
	if opts != nil {
		req = api.PauseRequest{Reason: opts.Reason, By: opts.By}
	}
	var resp api.PausesResponse
	c0 := call{to: ingress, subject: subject, header: nats.Header{"Content-Type": []string{"application/json"}}, retry: true}
	if err := c.t.json(ctx, c0, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
