package flow

import (
	"context"

	"github.com/flowrun/flow/internal/api"
)

// DefinitionInfo is a workflow definition on a queue as the history service knows it: its
// latest registration (build ID, patches, when) and the live workers that register it.
type DefinitionInfo = api.DefinitionInfo

// WorkerInfo is a live worker: its name, host, build and latest heartbeat.
type WorkerInfo = api.WorkerInfo

// DefinitionClient reads the workflow definitions the history service knows and the live
// workers that register them. Get one with [Client.Definitions]; it shares the client's
// connection and is safe for concurrent use.
type DefinitionClient struct{ t *transport }

// Definitions returns the client's operations on workflow definitions.
func (c *Client) Definitions() DefinitionClient { return DefinitionClient{t: c.t} }

// List returns the workflow definitions of queue ("" for every queue), sorted by queue and
// definition, each with the live workers that register it. A definition whose workers are all
// gone is listed with no workers: its runs wait (parked) until a worker that registers it
// starts.
func (d DefinitionClient) List(ctx context.Context, queue string) ([]DefinitionInfo, error) {
	var resp api.DefinitionsResponse
	if err := d.t.json(ctx, call{to: history, subject: api.SubjectDefinitions}, api.DefinitionsRequest{Queue: queue}, &resp); err != nil {
		return nil, err
	}
	if resp.Definitions == nil {
		resp.Definitions = []DefinitionInfo{}
	}
	return resp.Definitions, nil
}
