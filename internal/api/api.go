// Package api holds the wire types of the history service's queries, shared by the service
// (which answers them over NATS request/reply and HTTP) and by flow.Client (which asks), so
// that the two doors and their callers cannot drift apart.
//
// # NATS
//
// Requests are JSON on the subjects below (a nats.go micro service, "flow-history"); a reply is
// the JSON response, or an error: an empty body with the micro headers Nats-Service-Error-Code
// (one of the Code constants) and Nats-Service-Error (the message).
//
// # HTTP
//
//	GET  /v1/runs                   ListRequest as query parameters: ListResponse
//	GET  /v1/runs/{id}?at=&at_least= the snapshot: GetResponse
//	GET  /v1/runs/{id}/history      HistoryRequest as query parameters: HistoryResponse
//	GET  /v1/runs/{id}/watch        server-sent events, one per event: "id: <seq>", "event: <type>", "data: <envelope>"
//	POST /v1/runs/{id}/resume       ResumeRequest as JSON body (run_id from the path): ResumeResponse
//
// Errors are a status code (400, 404, 409, 410, 423, 500, 503) with the body {"error": Error}.
package api

import (
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// Subjects of the history service's NATS endpoints.
const (
	SubjectGet     = "flow.api.runs.get"
	SubjectHistory = "flow.api.runs.history"
	SubjectList    = "flow.api.runs.list"
	SubjectResume  = "flow.api.runs.resume"
)

// Subjects of the history service's NATS endpoints that answer a run's snapshot and history
// with its secrets (its seed and hook tokens) revealed, for operators: the deployed
// permissions (deploy/nats/auth.conf) grant them to no role, and flow.api.runs.get and
// flow.api.runs.history serve the secrets redacted (docs/operations.md#secrets).
const (
	SubjectSecretsGet     = DerivedPrefix + "runs.get"
	SubjectSecretsHistory = DerivedPrefix + "runs.history"
)

// Redacted replaces a secret the caller may not see: a run's seed, and a hook's token (as
// "redacted:<hook id>", unique per hook).
const Redacted = "redacted"

// GetRequest asks for a run's snapshot: the latest, or as of sequence At (time travel).
type GetRequest struct {
	RunID string `json:"run_id"`
	// At projects the history up to this sequence; 0 means the latest.
	At uint64 `json:"at,omitempty"`
	// AtLeast is the last sequence the caller knows exists: the answer includes it.
	AtLeast uint64 `json:"at_least,omitempty"`
}

// GetResponse is a run's snapshot, and its index entry.
type GetResponse struct {
	Snapshot *core.Snapshot `json:"snapshot"`
	// Entry is the run's runs index entry (with why it is parked, if it is).
	Entry *core.Summary `json:"entry,omitempty"`
	// Last is the run's last sequence: Snapshot.Seq unless At asked for an earlier one.
	Last uint64 `json:"last"`
	// StepWaits lists the attempts in flight that wait for a slot of their step's limit
	// (flow.LimitStep), with why; only for the latest snapshot.
	StepWaits []StepWait `json:"step_waits,omitempty"`
	// Damage is set for a run whose stored history is damaged (quarantined, or found so by this
	// read): Snapshot then projects the history's longest valid prefix, which ends at
	// Damage.ValidThrough (and Last).
	Damage *RunDamage `json:"damage,omitempty"`
}

// RunDamage says why a run's history is damaged and what of it is valid.
type RunDamage struct {
	Reason string `json:"reason"`
	// ValidThrough is the last sequence of the history's longest valid prefix.
	ValidThrough uint64 `json:"valid_through"`
	// Quarantined is set when the run is quarantined (FLOW_DAMAGED): no worker drives it until
	// an operator releases it (flow resume RUN --accept-damage, or flow terminate RUN).
	Quarantined bool `json:"quarantined"`
}

// StepWait is an attempt in flight waiting for a slot of its step's limit.
type StepWait struct {
	StepID  string    `json:"step_id"`
	Name    string    `json:"name"`
	Attempt int       `json:"attempt"`
	Why     string    `json:"why"`
	Since   time.Time `json:"since"`
}

// HistoryRequest asks for a page of a run's events.
type HistoryRequest struct {
	RunID string `json:"run_id"`
	// After is the last sequence already read; 0 starts at the first event.
	After uint64 `json:"after,omitempty"`
	// Limit bounds the page. Defaults to DefaultHistoryLimit; at most MaxHistoryLimit.
	Limit int `json:"limit,omitempty"`
	// AtLeast is the last sequence the caller knows exists.
	AtLeast uint64 `json:"at_least,omitempty"`
}

// Limits of a history page.
const (
	DefaultHistoryLimit = 1000
	MaxHistoryLimit     = 10000
)

// HistoryResponse is a page of events, in order.
type HistoryResponse struct {
	Events []event.Envelope `json:"events"`
	// More is set when events after the page exist: ask again after the last one.
	More bool `json:"more"`
	// Deleted is the run's tombstone when its history was deleted after its retention period:
	// the events were read from the archive Deleted.Archive names (docs/retention.md).
	Deleted *core.Deletion `json:"deleted,omitempty"`
}

// ListRequest filters and pages the runs index. The zero value lists the most recently updated
// runs first, DefaultListLimit of them.
type ListRequest struct {
	// Status keeps runs in any of these statuses (core.Status values).
	Status []string `json:"status,omitempty"`
	// Definition, Queue, Build and Parent keep runs with exactly this value.
	Definition string `json:"definition,omitempty"`
	Queue      string `json:"queue,omitempty"`
	Build      string `json:"build,omitempty"`
	Parent     string `json:"parent,omitempty"`
	// Since and Until keep runs started in [Since, Until).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Parked keeps only runs that are parked (blocked, or waiting for a worker of their build
	// or definition).
	Parked bool `json:"parked,omitempty"`
	// Limit bounds the page. Defaults to DefaultListLimit; at most MaxListLimit.
	Limit int `json:"limit,omitempty"`
	// Cursor continues a listing where the previous page's Next left it.
	Cursor string `json:"cursor,omitempty"`
	// Where keeps the runs a filter expression selects (docs/search.md), e.g.
	// `customer = "c-42" and status = "running" and started > "2026-12-01"`: built-in fields
	// and the search attributes the listed definitions declare. A filter that does not parse
	// or type-check is refused (CodeInvalid, HTTP 400) with a message saying what to write.
	Where string `json:"where,omitempty"`
	// IncludeDeleted lists the tombstones of runs deleted after their retention period too
	// (their entries have Deleted set); by default they are left out.
	IncludeDeleted bool `json:"include_deleted,omitempty"`
}

// Limits of a list page.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// ListResponse is a page of index entries, most recently updated first.
type ListResponse struct {
	Runs []core.Summary `json:"runs"`
	// Next is the cursor of the next page; empty on the last one.
	Next string `json:"next,omitempty"`
	// Total counts the runs that match the filter, over all pages.
	Total int `json:"total"`
}

// ResumeRequest asks the history service to dispatch a parked run again (`flow resume`).
type ResumeRequest struct {
	RunID string `json:"run_id"`
	// AcceptDamage releases a run the service quarantined because its history was found
	// damaged, after an operator checked it: it is driven from what its history holds.
	AcceptDamage bool `json:"accept_damage,omitempty"`
}

// ResumeResponse says what resuming did.
type ResumeResponse struct {
	RunID string `json:"run_id"`
	// Seq is the run's last sequence, which the task names.
	Seq uint64 `json:"seq"`
	// Status is the run's status.
	Status core.Status `json:"status"`
}

// Code classifies an error reply.
type Code string

// Error codes, with their HTTP status.
const (
	CodeInvalid     Code = "400" // the request is malformed
	CodeNoAuth      Code = "401" // the HTTP request carries no accepted bearer token or session
	CodeNotAllowed  Code = "403" // the caller's token may not do this (a read-only token acting, revealing secrets)
	CodeMisdirected Code = "421" // the HTTP request's Host is not one the service answers for
	CodeNotFound    Code = "404" // no such run
	CodeConflict    Code = "409" // the run's state refuses the request (it ended)
	CodeDamaged     Code = "423" // the run is quarantined: its history was found damaged
	CodeDeleted     Code = "410" // the run's history was deleted after its retention period, unarchived
	CodeInternal    Code = "500"
	CodeUnavailable Code = "503" // the service cannot reach NATS or is starting
)

// Error is an error reply.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("flow: history service: %s", e.Message) }

// SubjectAwait is the history service's long poll for a run's end.
const SubjectAwait = "flow.api.runs.await"

// AwaitRequest asks the history service to answer once run RunID ends or blocks, or after Wait.
type AwaitRequest struct {
	RunID string `json:"run_id"`
	// MustExist makes a run without events an error (CodeNotFound); otherwise the service waits
	// for it to start, as for a successor that is not started yet.
	MustExist bool `json:"must_exist,omitempty"`
	// Wait bounds the poll. Defaults to DefaultAwait; at most MaxAwait.
	Wait time.Duration `json:"wait,omitempty"`
}

// Bounds of an await.
const (
	DefaultAwait = 20 * time.Second
	MaxAwait     = 60 * time.Second
)

// AwaitResponse says how the run ended or why it is blocked, or that it did neither in time.
type AwaitResponse struct {
	// Ended is set when Snapshot holds the run's end (or, blocked, its diagnosis).
	Ended bool `json:"ended"`
	// Snapshot is what the run's last commit says about its end (core.Ending), or, for a blocked
	// run, its projection.
	Snapshot *core.Snapshot `json:"snapshot,omitempty"`
	// ReusedBy, for a run that ended (not continued as new), is the latest run that reuses its
	// caller run ID after it (start policies: <id>=_<n>); "" for none.
	ReusedBy string `json:"reused_by,omitempty"`
}

// The history service's event feed: every committed event as a CloudEvent in NATS binary mode
// on FeedPrefix + "<definition>.<run>.<type>", with the run's sequence of the event in the
// extension FeedExtSeq (see package services/history).
const (
	FeedPrefix = "flow.events."
	FeedExtSeq = "flowseq"
)
