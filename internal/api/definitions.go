package api

import (
	"time"

	"github.com/flowrun/flow/pkg/event"
)

// SubjectDefinitions is the history service's NATS endpoint listing workflow definitions and
// the live workers that serve them (DefinitionsRequest: DefinitionsResponse). Over HTTP:
//
//	GET /v1/definitions?queue=      DefinitionsRequest as query parameters: DefinitionsResponse
const SubjectDefinitions = "flow.api.definitions.list"

// DefinitionsRequest asks for the definitions of one queue, or of every queue.
type DefinitionsRequest struct {
	// Queue keeps the definitions and workers of this queue; empty means every queue.
	Queue string `json:"queue,omitempty"`
}

// DefinitionsResponse lists definitions, sorted by queue and definition, and the live workers
// that register none.
type DefinitionsResponse struct {
	Definitions []DefinitionInfo `json:"definitions"`
	// Idle are the live workers that register no workflow definition, sorted by queue and name.
	Idle []WorkerInfo `json:"idle,omitempty"`
}

// DefinitionInfo is a workflow definition on a queue: the latest registration of it, and the
// live workers that register it.
type DefinitionInfo struct {
	Definition string `json:"definition"`
	Queue      string `json:"queue"`
	// BuildID and Patches are those of the live worker that started last, or, when no worker
	// is alive, of the latest registration.
	BuildID string   `json:"build_id,omitempty"`
	Patches []string `json:"patches,omitempty"`
	// Attributes are the search attributes the definition declares, from the same
	// registration as BuildID and Patches.
	Attributes []event.AttributeDecl `json:"attributes,omitempty"`
	// UpdatedAt is when a worker last registered the definition; zero when the service holds
	// no registration.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Workers are the live workers that register the definition, the last started first.
	// Empty when none is alive: a start of the definition is refused, and its runs wait.
	Workers []WorkerInfo `json:"workers"`
	// LastSeen is the latest heartbeat the service saw of a worker registering the definition;
	// zero when it saw none since it started.
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// WorkerInfo is a live worker.
type WorkerInfo struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Queue string `json:"queue"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	// BuildID is the build of the worker's code; empty when it has none.
	BuildID   string    `json:"build_id,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// BeatAt is the worker's latest heartbeat, by its clock.
	BeatAt time.Time `json:"beat_at"`
}
