// Package event defines Flow's event catalogue: the only durable record of a workflow run.
//
// A run is an append-only stream of events. Each stored event is an [Envelope]: the run ID, a
// per-run sequence starting at 1, the UTC time the writer recorded, and a typed [Payload]. Event
// type names ([Type]) are stable strings such as "step.completed"; they are never renumbered and
// the meaning of a stored event never changes. New features add new types.
//
// # Encoding
//
// Envelopes encode to JSON with snake_case fields:
//
//	{"run_id":"order-1","seq":2,"time":"2026-11-30T09:00:00Z","type":"step.scheduled","data":{...}}
//
// [Envelope.UnmarshalJSON] rejects unknown types, missing required fields and malformed data with
// an error that names the sequence and the field. Unknown fields inside data are ignored, so a
// newer writer may add optional fields without breaking older readers. JSON Schemas for every
// payload live in the repository's schemas/ directory and are checked against these types.
//
// # The catalogue
//
// Each event type is a constant of [Type], listed in [Types] and made by [New], and a payload
// type that declares, next to it, what code treating every event alike needs: [Payload] (its
// type and validation) and [Described] (its payload fields, which may be offloaded to the
// payload store, and its one-line summary for humans). Payload offload and resolution, the
// payload collector and the web UI's timeline read these declarations instead of switching over
// the types; only the core's state machine (internal/core) interprets each type by itself.
//
// # Identifiers
//
// Run IDs become NATS subject tokens and key-value keys, and decision IDs become parts of run IDs
// and idempotency keys, so both are restricted: see [ValidateRunID] and [ValidateID].
//
// This package is a leaf: it imports only the standard library.
package event
