package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/flowrun/flow/pkg/event"
)

// The ingress service's doors: inputs from outside (starts, signals, hook deliveries, cancels and
// terminations) over NATS request/reply and HTTP. Every input is committed to the run's history
// before it is acknowledged.
//
// # NATS
//
//	flow.ingress.start.<definition>      start a run
//	flow.ingress.signal.<run>.<name>     signal a run
//	flow.ingress.hook.<token>            deliver to a hook
//	flow.ingress.cancel.<run>            request cancellation
//	flow.ingress.terminate.<run>         end a run at once, as failed
//
// A message is a CloudEvent (binary mode: ce-* headers; structured mode: a JSON body with
// "specversion", or Content-Type application/cloudevents+json) or plain JSON. For a CloudEvent,
// data is the start's input, the signal's or hook's payload, or a CancelRequest; its id is the
// delivery ID; a start takes its run ID from the extension "flowrunid" (else the event's id,
// when it is a valid run ID, else a digest of source and id), its queue from "flowqueue", and
// its start policies from the extensions ExtOnConflict .. ExtRequestID.
// A plain message's body is a StartRequest for a start, the payload of a signal or hook, or a
// CancelRequest; its delivery ID is the header Idempotency-Key or Nats-Msg-Id (a message without
// one gets a fresh ID, and so is not deduplicated), which also names the run of a start whose body
// names none.
//
// A request gets an InputResponse, or an Error as the JSON body with the headers
// HeaderErrorCode and HeaderStatus. A rejected message published without a reply subject goes
// to DeadLetterPrefix+<kind> with its original body and headers, plus HeaderErrorCode,
// HeaderErrorMessage and HeaderOriginalSubject.
//
// # HTTP
//
//	POST /v1/workflows/{definition}/runs   start a run: 201 (or 200 for an existing one)
//	POST /v1/runs/{run}/signals/{name}     signal a run: 202
//	POST /v1/hooks/{token}                 deliver to a hook (no bearer token: the hook's token is the credential): 202
//	POST /v1/runs/{run}/cancel             request cancellation: 202
//	POST /v1/runs/{run}/terminate          end the run as failed: 202
//	GET  /v1/openapi.json                  the OpenAPI document of these routes
//	GET  /healthz                          liveness: 200 while the process serves
//	GET  /readyz                           readiness: 200 once started and connected to NATS, else 503
//	GET  /metrics                          the process's metrics (Prometheus text format)
//
// Bodies are as on NATS; a CloudEvent in binary or structured mode is read by the CloudEvents
// SDK's HTTP binding. Errors are a status code with the body Error.
const (
	IngressPrefix          = "flow.ingress."
	SubjectStartPrefix     = IngressPrefix + "start."
	SubjectSignalPrefix    = IngressPrefix + "signal."
	SubjectHookPrefix      = IngressPrefix + "hook."
	SubjectCancelPrefix    = IngressPrefix + "cancel."
	SubjectTerminatePrefix = IngressPrefix + "terminate."
	// IngressQueueGroup is the queue group every ingress replica subscribes in.
	IngressQueueGroup = "flow-ingress"
	// DeadLetterPrefix prefixes the subjects of rejected plain publishes:
	// flow.deadletter.ingress.<kind>, kind being start, signal, hook, cancel, terminate or
	// unknown. Stream FLOW_DEADLETTER keeps them.
	DeadLetterPrefix = "flow.deadletter.ingress."
)

// Headers of ingress replies and dead letters.
const (
	HeaderErrorCode       = "Flow-Error-Code"
	HeaderErrorMessage    = "Flow-Error-Message"
	HeaderStatus          = "Flow-Status"
	HeaderOriginalSubject = "Flow-Original-Subject"
	// HeaderIdempotencyKey carries a plain message's delivery ID (HTTP and NATS).
	HeaderIdempotencyKey = "Idempotency-Key"
)

// CloudEvents extensions the ingress reads.
const (
	ExtRunID = "flowrunid"
	ExtQueue = "flowqueue"
	// ExtAttributes carries a start's search attributes: a JSON object of values by name, as
	// StartRequest.Attributes.
	ExtAttributes = "flowattrs"
	// ExtPriority is a start's priority, an integer; ExtControlKey its flow-control key;
	// ExtControl its flow control, as the JSON of an event.FlowControl.
	ExtPriority   = "flowpriority"
	ExtControlKey = "flowcontrolkey"
	ExtControl    = "flowcontrol"
)

// CloudEvents extensions of a start's policies (docs/start-policies.md): the fields of
// StartPolicies, durations as Go durations ("30s").
const (
	ExtOnConflict     = "flowonconflict"
	ExtReuse          = "flowreuse"
	ExtDelay          = "flowdelay"
	ExtDedupKey       = "flowdedupkey"
	ExtDedupWindow    = "flowdedupwindow"
	ExtDebounceKey    = "flowdebouncekey"
	ExtDebouncePeriod = "flowdebounceperiod"
	// ExtRequestID identifies the start request (StartPolicies.RequestID); without it, a
	// CloudEvent's id is the request ID.
	ExtRequestID = "flowrequestid"
)

// CloudEvents extensions of a start's timeouts (docs/timeouts.md), as Go durations ("1h").
const (
	ExtExecutionTimeout = "flowexecutiontimeout"
	ExtRunTimeout       = "flowruntimeout"
)

// RunTimeouts are a start's execution and run timeouts; zero for the definition's defaults.
type RunTimeouts struct {
	Execution event.Duration `json:"execution,omitempty"`
	Run       event.Duration `json:"run,omitempty"`
}

// StartPolicies are a start's policies for a taken run ID, its delay, and its deduplication or
// debounce (docs/start-policies.md). Every field is optional.
type StartPolicies struct {
	// OnConflict is what to do when the run ID's latest run is active: "fail" (the default),
	// "use_existing" or "terminate_existing".
	OnConflict event.ConflictPolicy `json:"on_conflict,omitempty"`
	// Reuse is whether a new run may take the ID of one that ended: "refuse" (the default),
	// "allow" or "allow_failed_only".
	Reuse event.ReusePolicy `json:"reuse,omitempty"`
	// Delay delays the run's first decision, as a duration ("10m").
	Delay event.Duration `json:"delay,omitempty"`
	// DedupKey, with DedupWindow (a duration), returns the first run started with the key
	// within the window to every later start, whatever run ID it asks for.
	DedupKey    string         `json:"dedup_key,omitempty"`
	DedupWindow event.Duration `json:"dedup_window,omitempty"`
	// Debounce collapses the starts with its key within its quiet period into one run, started
	// after the period with the latest input.
	Debounce *event.Debounce `json:"debounce,omitempty"`
	// RequestID identifies the request, so that its retry returns the run it started rather
	// than applying OnConflict or Reuse again. Defaults to the delivery ID (Idempotency-Key,
	// Nats-Msg-Id) of a plain request.
	RequestID string `json:"request_id,omitempty"`
}

// StartSubject, SignalSubject, HookSubject, CancelSubject and TerminateSubject name the NATS
// subjects of the inputs.
func StartSubject(definition string) string   { return SubjectStartPrefix + definition }
func SignalSubject(runID, name string) string { return SubjectSignalPrefix + runID + "." + name }
func HookSubject(token string) string         { return SubjectHookPrefix + token }
func CancelSubject(runID string) string       { return SubjectCancelPrefix + runID }
func TerminateSubject(runID string) string    { return SubjectTerminatePrefix + runID }

// DeadLetterSubject names the dead-letter subject of rejected plain publishes of kind.
func DeadLetterSubject(kind InputKind) string { return DeadLetterPrefix + string(kind) }

// InputKind names an input.
type InputKind string

// ParseInputKind returns the kind s names, and whether it names one.
func ParseInputKind(s string) (InputKind, bool) {
	k := InputKind(s)
	return k, k == KindStart || k == KindSignal || k == KindHook || k == KindCancel || k == KindTerminate ||
		k == KindUpdate || k == KindUpdateWithStart || k == KindSignalWithStart ||
		k == KindPause || k == KindUnpause
}

// Input kinds.
const (
	KindStart     InputKind = "start"
	KindSignal    InputKind = "signal"
	KindHook      InputKind = "hook"
	KindCancel    InputKind = "cancel"
	KindTerminate InputKind = "terminate"
)

// StartRequest is the plain body of a start.
type StartRequest struct {
	// RunID is the run's ID: 1-128 letters, digits, '-' or '_'. Empty generates one. Starting
	// an existing ID again with the same definition and input returns it.
	RunID string `json:"run_id,omitempty"`
	// Queue is the task queue. Defaults to the ingress's (FLOW_QUEUE, "default").
	Queue string `json:"queue,omitempty"`
	// Input is the workflow's input; absent means null.
	Input json.RawMessage `json:"input,omitempty"`
	// Attributes are the run's search attributes: JSON values by name, each of the type the
	// definition declares (or a string that reads as one, e.g. "42" for an int, "2026-12-01"
	// for a time, "a,b" for a keyword list). Absent for none.
	Attributes map[string]json.RawMessage `json:"attributes,omitempty"`
	// Priority orders the run's admission under flow control, higher first. Defaults to 0.
	Priority int `json:"priority,omitempty"`
	// ControlKey is the run's flow-control key, instead of the one read from the input.
	ControlKey string `json:"control_key,omitempty"`
	// Control is the run's flow control, instead of its definition's.
	Control *event.FlowControl `json:"control,omitempty"`
	// OnConflict, Reuse, Delay, DedupKey, DedupWindow, Debounce and RequestID are the start's
	// policies, as StartPolicies describes them (docs/start-policies.md).
	OnConflict  event.ConflictPolicy `json:"on_conflict,omitempty"`
	Reuse       event.ReusePolicy    `json:"reuse,omitempty"`
	Delay       event.Duration       `json:"delay,omitempty"`
	DedupKey    string               `json:"dedup_key,omitempty"`
	DedupWindow event.Duration       `json:"dedup_window,omitempty"`
	Debounce    *event.Debounce      `json:"debounce,omitempty"`
	RequestID   string               `json:"request_id,omitempty"`
	// ExecutionTimeout bounds the run and the runs it continues as; RunTimeout this run
	// alone (docs/timeouts.md). Durations ("1h"); absent for the definition's defaults.
	ExecutionTimeout event.Duration `json:"execution_timeout,omitempty"`
	RunTimeout       event.Duration `json:"run_timeout,omitempty"`
}

// Policies returns the start policies of r.
func (r *StartRequest) Policies() StartPolicies {
	return StartPolicies{OnConflict: r.OnConflict, Reuse: r.Reuse, Delay: r.Delay, DedupKey: r.DedupKey,
		DedupWindow: r.DedupWindow, Debounce: r.Debounce, RequestID: r.RequestID}
}

// CancelRequest is the body of a cancel or terminate.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// InputResponse acknowledges an input committed to a run's history.
type InputResponse struct {
	// RunID is the run that received the input: the run asked for, or, for a signal or a cancel
	// of a run that continued as new, the latest run of its chain.
	RunID string `json:"run_id"`
	// Created is set by a start that created the run; clear when the run existed (with the
	// same definition and input).
	Created bool `json:"created,omitempty"`
	// DeliveryID is the delivery ID the input was recorded under (signals and hooks).
	DeliveryID string `json:"delivery_id,omitempty"`
}

// IngressCode classifies an ingress error.
type IngressCode string

// Ingress error codes. Each maps to one HTTP status (statusOf).
const (
	CodeInvalidJSON      IngressCode = "invalid_json"           // 400
	CodeInvalidName      IngressCode = "invalid_name"           // 400
	CodeInvalidEvent     IngressCode = "invalid_cloudevent"     // 400
	CodeInvalidRequest   IngressCode = "invalid_request"        // 400
	CodeUnauthorized     IngressCode = "unauthorized"           // 401
	CodeForbidden        IngressCode = "forbidden"              // 403: a cross-site request, or a host not served
	CodeRunNotFound      IngressCode = "run_not_found"          // 404
	CodeHookNotFound     IngressCode = "hook_not_found"         // 404
	CodeRouteNotFound    IngressCode = "route_not_found"        // 404
	CodeMethodNotAllowed IngressCode = "method_not_allowed"     // 405
	CodeRunEnded         IngressCode = "run_ended"              // 409
	CodeRunExists        IngressCode = "run_exists"             // 409
	CodeDeliveryConflict IngressCode = "delivery_conflict"      // 409
	CodeHookReceived     IngressCode = "hook_already_received"  // 409
	CodeNoWorker         IngressCode = "no_worker"              // 409
	CodeTooLarge         IngressCode = "payload_too_large"      // 413
	CodeMediaType        IngressCode = "unsupported_media_type" // 415
	CodeRunDamaged       IngressCode = "run_damaged"            // 423
	CodeRunDeleted       IngressCode = "run_deleted"            // 410: deleted after its retention period
	CodeIngressInternal  IngressCode = "internal"               // 500
	CodeIngressBusy      IngressCode = "unavailable"            // 503
	// CodeRateLimited refuses an input over a rate limit of its run or of its sender; the
	// error's RetryAfter says when to try again.
	CodeRateLimited IngressCode = "rate_limited" // 429
	// CodeTooManyPending refuses a signal or update to a run that holds as many inputs its
	// workflow has not taken yet as the ingress allows: the run is not consuming them.
	CodeTooManyPending IngressCode = "too_many_pending" // 429
)

// IngressError is an ingress error reply: {"code": ..., "message": ...}. The message says what
// was wrong and what to do.
type IngressError struct {
	Code    IngressCode `json:"code"`
	Message string      `json:"message"`
	// RetryAfter is, for a 429, the whole seconds after which the input may be accepted (HTTP
	// sends it in the Retry-After header too); 0 otherwise.
	RetryAfter int `json:"retry_after,omitempty"`
}

func (e *IngressError) Error() string {
	return fmt.Sprintf("flow: ingress: %s (%s)", e.Message, e.Code)
}

// HTTPStatus is the HTTP status of the error's code.
func (e *IngressError) HTTPStatus() int { return statusOf(e.Code) }

func statusOf(c IngressCode) int {
	switch c {
	case CodeInvalidJSON, CodeInvalidName, CodeInvalidEvent, CodeInvalidRequest:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeRunNotFound, CodeHookNotFound, CodeRouteNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeRunEnded, CodeRunExists, CodeDeliveryConflict, CodeHookReceived, CodeNoWorker:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeMediaType:
		return http.StatusUnsupportedMediaType
	case CodeRunDamaged:
		return http.StatusLocked
	case CodeRunDeleted:
		return http.StatusGone
	case CodeIngressBusy:
		return http.StatusServiceUnavailable
	case CodeRateLimited, CodeTooManyPending:
		return http.StatusTooManyRequests
	case CodeScheduleNotFound:
		return http.StatusNotFound
	case CodeScheduleExists:
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// IngressCodes returns every ingress error code.
func IngressCodes() []IngressCode {
	return []IngressCode{CodeInvalidJSON, CodeInvalidName, CodeInvalidEvent, CodeInvalidRequest, CodeUnauthorized, CodeForbidden,
		CodeRunNotFound, CodeHookNotFound, CodeRouteNotFound, CodeMethodNotAllowed, CodeRunEnded, CodeRunExists,
		CodeDeliveryConflict, CodeHookReceived, CodeNoWorker, CodeTooLarge, CodeMediaType, CodeRunDamaged,
		CodeIngressInternal, CodeIngressBusy, CodeRunDeleted, CodeScheduleNotFound, CodeScheduleExists,
		CodeRateLimited, CodeTooManyPending}
}
