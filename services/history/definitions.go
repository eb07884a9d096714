package history

import (
	"context"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/liveness"
)

// listDefinitions answers a definitions request from the service's view of FLOW_WORKERS and
// FLOW_DEFINITIONS.
func (s *Service) listDefinitions(_ context.Context, req api.DefinitionsRequest) (*api.DefinitionsResponse, error) {
	resp := &api.DefinitionsResponse{Definitions: []api.DefinitionInfo{}}
	for _, d := range s.live.List() {
		if req.Queue != "" && d.Queue != req.Queue {
			continue
		}
		info := api.DefinitionInfo{Definition: d.Definition, Queue: d.Queue, BuildID: d.BuildID, Patches: d.Patches, Attributes: d.Attributes,
			UpdatedAt: d.UpdatedAt, LastSeen: d.LastSeen, Workers: make([]api.WorkerInfo, 0, len(d.Workers))}
		for _, w := range d.Workers {
			info.Workers = append(info.Workers, workerInfo(w))
		}
		resp.Definitions = append(resp.Definitions, info)
	}
	for _, w := range s.live.Workers(req.Queue) {
		if len(w.Definitions) == 0 {
			resp.Idle = append(resp.Idle, workerInfo(w))
		}
	}
	return resp, nil
}

func workerInfo(w liveness.Worker) api.WorkerInfo {
	return api.WorkerInfo{ID: w.ID, Name: w.Name, Queue: w.Queue, Host: w.Host, PID: w.PID, BuildID: w.BuildID,
		StartedAt: w.StartedAt, BeatAt: w.BeatAt}
}
