package schemas_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/schemas"
)

// compiled compiles the schemas once; compiled schemas are safe for concurrent use.
var compiled = sync.OnceValues(func() (*compiledSchemas, error) {
	env, payloads, err := schemas.Compile()
	return &compiledSchemas{envelope: env, payloads: payloads}, err
})

type compiledSchemas struct {
	envelope *jsonschema.Schema
	payloads map[event.Type]*jsonschema.Schema
}

func compile(t *testing.T) *compiledSchemas {
	t.Helper()
	c, err := compiled()
	require.NoError(t, err)
	return c
}

// at is the recorded time of the examples.
var at = time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.UTC)

type example struct {
	name    string
	payload event.Payload
}

// examples returns, for every event type, realistic payloads that between them set every field,
// nested ones included.
func examples() []example {
	charge := event.RetryPolicy{MaxAttempts: 5, InitialInterval: 250 * time.Millisecond, BackoffCoefficient: 1.5,
		MaxInterval: 30 * time.Second, NonRetryable: []string{"card_declined", "bad_request", "card_declined"},
		OnExhaustion: event.ExhaustionReturnError}.Normalize()
	return []example{
		{"child run continued", &event.RunStarted{
			Spec:          event.Spec{Definition: "order", BuildID: "build-7", Patches: []string{"fix-tax", "v2-pricing"}},
			Input:         json.RawMessage(`{"order_id":"o-1","items":[{"sku":"A-1","qty":2}]}`),
			Queue:         "orders",
			Seed:          "9f86d081884c7d65",
			Parent:        &event.ParentRef{RunID: "checkout-1", ChildID: "order"},
			ContinuedFrom: "checkout-1=order",
			Generation:    1,
			TraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			Attributes:    exampleAttributes(),
			Timeouts: &event.RunTimeouts{Execution: event.Duration(24 * time.Hour), ExecutionDeadline: at.Add(20 * time.Hour),
				Run: event.Duration(time.Hour), RunDeadline: at.Add(time.Hour)},
		}},
		{"reused and delayed", &event.RunStarted{
			Spec: event.Spec{Definition: "order"}, Input: json.RawMessage(`{"order_id":"o-2"}`), Seed: "c4ca4238a0b92382",
			NotBefore: at.Add(time.Minute),
			StartPolicy: &event.StartPolicy{OnConflict: event.ConflictTerminateExisting, Reuse: event.ReuseAllowFailedOnly,
				RunID: "order-2", Previous: "order-2", Replaces: true, Delay: event.Duration(time.Minute),
				DedupKey: "invoice-42", DedupWindow: event.Duration(time.Hour), RequestID: "req-7"},
		}},
		{"debounced", &event.RunStarted{
			Spec: event.Spec{Definition: "save"}, Input: json.RawMessage(`{"doc":"d-9"}`), Seed: "c81e728d9d4c2f63",
			NotBefore:   at.Add(30 * time.Second),
			StartPolicy: &event.StartPolicy{Delay: event.Duration(30 * time.Second), Debounce: &event.Debounce{Key: "doc-9", Period: event.Duration(30 * time.Second)}},
		}},
		{"batch", &event.StepScheduled{Steps: []event.StepSpec{
			{ID: "charge", Name: "charge-card", Input: json.RawMessage(`{"amount_cents":1250,"currency":"EUR"}`), Retry: charge},
			{ID: "reserve", Name: "reserve-stock", Input: json.RawMessage(`null`), Retry: event.RetryPolicy{}.Normalize(),
				Timeouts: &event.StepTimeouts{ScheduleToStart: event.Duration(time.Minute), StartToClose: event.Duration(10 * time.Minute),
					Heartbeat: event.Duration(30 * time.Second)}},
		}}},
		{"retried", &event.StepCompleted{StepID: "charge", Attempt: 2, Output: json.RawMessage(`{"charge_id":"ch_1"}`)}},
		{"exhausted", &event.StepFailed{StepID: "charge", Attempt: 5,
			Error: event.ErrorInfo{Kind: "timeout", Message: "payment gateway timed out"}, Retryable: true, Final: true}},
		{"heartbeat timed out", &event.StepFailed{StepID: "reserve", Attempt: 1,
			Error:     event.ErrorInfo{Kind: event.TimeoutHeartbeat, Message: "attempt 1: the heartbeat-timeout of 30s passed"},
			Retryable: true, Timeout: event.TimeoutHeartbeat}},
		{"backoff", &event.StepRetryScheduled{StepID: "charge", Attempt: 2, Due: at.Add(250 * time.Millisecond)}},
		{"backoff elapsed", &event.StepRetryFired{StepID: "charge", Attempt: 2}},
		{"cancelled run", &event.StepCancelled{Steps: []event.CancelledStep{
			{StepID: "charge", Attempt: 2, SideEffectUnknown: true},
			{StepID: "reserve", Attempt: 1},
		}, Reason: "customer withdrew the order", Cause: event.CauseCancelRequested}},
		{"sleep", &event.WaitScheduled{WaitID: "cooldown", Deadline: at.Add(90 * time.Second), Duration: event.Duration(90 * time.Second)}},
		{"fired", &event.WaitFired{WaitID: "cooldown"}},
		{"approval", &event.SignalAwaited{WaitID: "approval", Name: "approve"}},
		{"approval", &event.SignalReceived{Name: "approve", Payload: json.RawMessage(`{"by":"ops@example.com"}`), DeliveryID: "msg-42",
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"payment callback", &event.HookCreated{HookID: "payment", Token: "hk_3q2+7w", Metadata: json.RawMessage(`{"provider":"acme-pay"}`)}},
		{"payment callback", &event.HookReceived{HookID: "payment", Payload: json.RawMessage(`{"status":"paid"}`), DeliveryID: "evt_981",
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"batch", &event.ChildScheduled{Children: []event.ChildSpec{
			{ChildID: "ship", RunID: "order-1=ship", Definition: "shipping", Input: json.RawMessage(`{"address":"1 Main St"}`), CancelPolicy: event.CancelPolicyAbandon},
			{ChildID: "invoice", RunID: "order-1=invoice", Definition: "invoicing", Input: json.RawMessage(`null`), CancelPolicy: event.CancelPolicyRequest},
		}}},
		{"completed", &event.ChildSettled{ChildID: "ship", RunID: "order-1=ship=2", Outcome: event.OutcomeCompleted, Output: json.RawMessage(`{"tracking":"TRK1"}`)}},
		{"failed", &event.ChildSettled{ChildID: "invoice", RunID: "order-1=invoice", Outcome: event.OutcomeFailed,
			Error: &event.ErrorInfo{Kind: "tax_service", Message: "tax service unavailable"}}},
		{"operator", &event.RunCancelRequested{Reason: "customer withdrew the order", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"batch job", &event.RunCancelRequested{Reason: "bad deploy", DeliveryID: "batch:cleanup-1:order-1"}},
		{"parent", &event.RunCancelRequested{Reason: `parent run "order-1" ended (cancelled)`, Parent: "order-1"}},
		{"nondeterminism", &event.DecisionFailed{Kind: "nondeterminism", Code: "FLOW-REPLAY-1",
			Detail: `step "charge" was recorded with name "charge-card", the code now says "charge"`, BuildID: "build-8",
			Mismatch: &event.Mismatch{Kind: "step", ID: "charge", Field: "name", Recorded: `"charge-card"`, Produced: `"charge"`, Seq: 2}}},
		{"output", &event.RunCompleted{Output: json.RawMessage(`{"status":"shipped"}`)}},
		{"step exhausted", &event.RunFailed{Error: event.ErrorInfo{Kind: "card_declined", Message: "card declined"}, Cause: event.CauseStepExhausted}},
		{"terminated by a batch job", &event.RunFailed{Error: event.ErrorInfo{Kind: "terminated", Message: "bad deploy"}, Cause: event.CauseOperator,
			DeliveryID: "batch:cleanup-2:order-1"}},
		{"terminated", &event.RunCancelled{Reason: "stuck on a bad deploy", Cause: event.CauseOperator}},
		{"next generation", &event.RunContinuedAsNew{SuccessorRunID: "order-1=1", Input: json.RawMessage(`{"cursor":"c-100"}`)}},
		{"order number", &event.SideEffectRecorded{SideEffectID: "order-number", Value: json.RawMessage(`"ord-8842"`)}},
		{"stage paid", &event.AttributesUpserted{UpsertID: "stage-paid", Attributes: exampleAttributes()}},
		{"deposit", &event.UpdateReceived{UpdateID: "upd-7", Name: "deposit", Payload: json.RawMessage(`{"amount_cents":500}`),
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"deposit", &event.UpdateAccepted{UpdateID: "upd-7"}},
		{"negative deposit", &event.UpdateRejected{UpdateID: "upd-8", Error: event.ErrorInfo{Kind: "invalid_amount", Message: "a deposit must be positive"}}},
		{"deposited", &event.UpdateCompleted{UpdateID: "upd-7", Result: json.RawMessage(`{"balance_cents":10500}`)}},
		{"ledger closed", &event.UpdateCompleted{UpdateID: "upd-9", Error: &event.ErrorInfo{Kind: "closed", Message: "the ledger closed before posting"}}},
		{"quiet period over", &event.RunDelayFired{NotBefore: at.Add(30 * time.Second)}},
		{"a later save", &event.RunDebounced{Input: json.RawMessage(`{"doc":"d-9","rev":3}`), NotBefore: at.Add(40 * time.Second),
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Replaces: 1}},
		{"under flow control", &event.RunStarted{
			Spec: event.Spec{Definition: "report"}, Input: json.RawMessage(`{"customer":"c-42"}`), Seed: "9f86d081884c7d65", Priority: 5,
			Control: &event.FlowControl{Group: "reports", Key: "c-42", KeyPath: "$.customer", Concurrency: 50, KeyConcurrency: 2,
				Rate: 200, RatePeriod: event.Duration(time.Second), KeyRate: 10, KeyRatePeriod: event.Duration(time.Minute), OnLimit: event.OnLimitQueue},
		}},
		{"after a wait", &event.RunAdmitted{Group: "reports", Key: "c-42", Queued: event.Duration(1500 * time.Millisecond)}},
		{"workflow cancelled", &event.StepCancelled{Steps: []event.CancelledStep{{StepID: "quote", Attempt: 1, SideEffectUnknown: true}},
			Reason: `step "quote" cancelled by the workflow (try_cancel)`, Cause: event.CauseWorkflow, Cancellation: event.CancelTry}},
		{"wait cancelled", &event.StepCancelRequested{StepID: "export", Attempt: 2, Policy: event.CancelWait, Reason: `step "export" cancelled by the workflow (wait_cancelled)`}},
		{"wait cancelled", &event.ChildCancelRequested{ChildID: "ship", RunID: "order-1=ship", Policy: event.CancelWait, Reason: `child "ship" cancelled by the workflow (wait_cancelled)`}},
		{"abandoned", &event.ChildSettled{ChildID: "ship", RunID: "order-1=ship", Outcome: event.OutcomeCancelled,
			Error: &event.ErrorInfo{Kind: "cancelled", Message: `child "ship" cancelled by the workflow (abandon)`}, Cancellation: event.CancelAbandon}},
		{"retried child", &event.ChildScheduled{Children: []event.ChildSpec{{ChildID: "ship", RunID: "order-1=ship", Definition: "shipping",
			Input: json.RawMessage(`null`), CancelPolicy: event.CancelPolicyRequest, Retry: &charge}}}},
		{"child retry", &event.ChildRetryScheduled{ChildID: "ship", Attempt: 2, RunID: "order-1=ship=_2", Due: at.Add(time.Second),
			FailedRunID: "order-1=ship", Error: event.ErrorInfo{Kind: "carrier", Message: "carrier unavailable"}}},
		{"child retry", &event.ChildRetryFired{ChildID: "ship", Attempt: 2, RunID: "order-1=ship=_2"}},
		{"retried child run", &event.RunStarted{Spec: event.Spec{Definition: "shipping"}, Input: json.RawMessage(`null`), Seed: "s",
			Parent: &event.ParentRef{RunID: "order-1", ChildID: "ship", Attempt: 2}}},
		{"singleton replaced", &event.RunCancelled{Reason: `cancelled by flow control: replaced by the newer run "sync-2"`, Cause: event.CauseFlowControl}},
		{"a rerun", &event.RunStarted{
			Spec: event.Spec{Definition: "order"}, Input: json.RawMessage(`{"order":"o-2"}`), Seed: "9f86d081884c7d65",
			ResetFrom: &event.ResetFrom{RunID: "order-1", Seq: 7, Mode: event.ResetRerun, StepID: "charge", Reason: "fixed the card gateway",
				RequestID: "req-1", DropInputs: true, InputReplaced: true, CopiedTo: 12, Reapplied: 0, SeedRunID: "order-1", Readmit: true,
				AbortedUpdates: []string{"upd-3"}},
		}},
		{"a reset of an active run", &event.RunReset{NewRunID: "order-1=_reset-0a1b2c3d4e5f6a7b", Seq: 7, Mode: event.ResetRerun, StepID: "charge",
			Reason: "fixed the card gateway", RequestID: "req-1", DropInputs: true, Terminated: true, Input: json.RawMessage(`{"order":"o-2"}`)}},
		{"by a schedule", &event.RunStarted{
			Spec: event.Spec{Definition: "report"}, Input: json.RawMessage(`{"region":"eu"}`), Seed: "2c26b46b68ffc68f",
			Schedule: &event.ScheduleRef{Name: "report", Slot: time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), Action: event.ScheduleScheduled},
		}},
		{"operator", &event.RunPaused{Reason: "payment gateway maintenance", Cause: event.PauseOperator, By: "ann@example.com", DeliveryID: "req-7",
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"step exhausted", &event.RunPaused{Reason: `step "charge" (charge-card) exhausted 5 attempt(s): timeout: payment gateway timed out`,
			Cause: event.PauseStepExhausted, StepID: "charge", Attempt: 5, Error: &event.ErrorInfo{Kind: "timeout", Message: "payment gateway timed out"}}},
		{"fixed", &event.RunUnpaused{Reason: "gateway fixed", By: "ann@example.com", DeliveryID: "req-8", Paused: event.Duration(90 * time.Minute),
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"retention", &event.RunDeleted{Reason: "retention 720h0m0s passed since the run ended at 2026-11-01T09:00:00Z",
			Archive: "objectstore:FLOW_ARCHIVE/order-1", Msgs: 11, Summary: json.RawMessage(`{"run_id":"order-1","definition":"order","status":"completed","seq":11}`)}},
		{"voided a foreign write", &event.RunDamageAccepted{Reason: `stream message 12 holds seq 7 where seq 3 was next`,
			By: "resume --accept-damage", After: 9, Through: 12}},
	}
}

// minimal returns, for every event type, a payload with only the fields Validate requires.
func minimal() []event.Payload {
	return []event.Payload{
		&event.RunStarted{Spec: event.Spec{Definition: "order"}, Input: json.RawMessage(`null`), Seed: "s"},
		&event.StepScheduled{Steps: []event.StepSpec{{ID: "a", Name: "a", Input: json.RawMessage(`null`), Retry: event.RetryPolicy{}.Normalize()}}},
		&event.StepCompleted{StepID: "a", Attempt: 1, Output: json.RawMessage(`null`)},
		&event.StepFailed{StepID: "a", Attempt: 1, Error: event.ErrorInfo{Message: "boom"}},
		&event.StepRetryScheduled{StepID: "a", Attempt: 2, Due: at},
		&event.StepRetryFired{StepID: "a", Attempt: 2},
		&event.StepCancelled{Steps: []event.CancelledStep{{StepID: "a", Attempt: 1}}, Cause: event.CauseWorkflow},
		&event.WaitScheduled{WaitID: "w", Deadline: at},
		&event.WaitFired{WaitID: "w"},
		&event.SignalAwaited{WaitID: "w", Name: "go"},
		&event.SignalReceived{Name: "go", Payload: json.RawMessage(`null`), DeliveryID: "d"},
		&event.HookCreated{HookID: "h", Token: "t"},
		&event.HookReceived{HookID: "h", Payload: json.RawMessage(`null`), DeliveryID: "d"},
		&event.ChildScheduled{Children: []event.ChildSpec{{ChildID: "c", RunID: "r=c", Definition: "d", Input: json.RawMessage(`null`), CancelPolicy: event.CancelPolicyRequest}}},
		&event.ChildSettled{ChildID: "c", RunID: "r=c", Outcome: event.OutcomeCancelled},
		&event.RunCancelRequested{},
		&event.DecisionFailed{Kind: "panic", Detail: "boom"},
		&event.RunCompleted{Output: json.RawMessage(`null`)},
		&event.RunFailed{Error: event.ErrorInfo{Message: "boom"}, Cause: event.CauseWorkflow},
		&event.RunCancelled{Cause: event.CauseWorkflow},
		&event.RunContinuedAsNew{SuccessorRunID: "r=1", Input: json.RawMessage(`null`)},
		&event.SideEffectRecorded{SideEffectID: "s", Value: json.RawMessage(`null`)},
		&event.AttributesUpserted{UpsertID: "u", Attributes: event.Attributes{"a": {Type: event.AttrBool, Value: json.RawMessage(`true`)}}},
		&event.UpdateReceived{UpdateID: "u", Name: "n", Payload: json.RawMessage(`null`)},
		&event.UpdateAccepted{UpdateID: "u"},
		&event.UpdateRejected{UpdateID: "u", Error: event.ErrorInfo{Message: "no"}},
		&event.UpdateCompleted{UpdateID: "u"},
		&event.RunDelayFired{NotBefore: at},
		&event.RunDebounced{Input: json.RawMessage(`null`), NotBefore: at},
		&event.RunAdmitted{Group: "g"},
		&event.StepCancelRequested{StepID: "a", Attempt: 1, Policy: event.CancelWait},
		&event.ChildCancelRequested{ChildID: "c", RunID: "r=c", Policy: event.CancelWait},
		&event.ChildRetryScheduled{ChildID: "c", Attempt: 2, RunID: "r=c=_2", Due: at, FailedRunID: "r=c", Error: event.ErrorInfo{Message: "boom"}},
		&event.ChildRetryFired{ChildID: "c", Attempt: 2, RunID: "r=c=_2"},
		&event.RunReset{NewRunID: "r=_reset-1", Seq: 1, Mode: event.ResetToSeq},
		&event.RunPaused{Cause: event.PauseOperator},
		&event.RunUnpaused{},
		&event.RunDeleted{Reason: "r", Msgs: 1},
		&event.RunDamageAccepted{Reason: "r", After: 1, Through: 1},
	}
}

// goAcceptsMissing lists, per type, the top-level fields the schema requires (Go always writes
// them) but that the Go decoder accepts when missing, because Validate does not check them.
var goAcceptsMissing = map[event.Type][]string{
	event.TypeStepFailed:         {"retryable", "final"},
	event.TypeStepCancelled:      {"reason"},
	event.TypeRunCancelRequested: {"reason"},
	event.TypeDecisionFailed:     {"code"},
	event.TypeRunCancelled:       {"reason"},
}

// validate decodes data as JSON and validates it against s.
func validate(t *testing.T, s *jsonschema.Schema, data []byte) error {
	t.Helper()
	require.NotNil(t, s)
	return schemas.Validate(s, data)
}

// rawSchema reads the schema file at p as a JSON object.
func rawSchema(t *testing.T, p string) map[string]any {
	t.Helper()
	b, err := fs.ReadFile(schemas.FS, p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func object(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	require.True(t, ok, "%s is %T, not an object", what, v)
	return m
}

// propertyNames returns the sorted keys of schema's properties and its required list.
func propertyNames(t *testing.T, schema map[string]any) (props, required []string) {
	t.Helper()
	props = slices.Sorted(maps.Keys(object(t, schema["properties"], "properties")))
	list, _ := schema["required"].([]any)
	for _, r := range list {
		required = append(required, r.(string))
	}
	slices.Sort(required)
	return props, required
}

// jsonFields returns the sorted JSON names of the fields of struct type typ, and of those it
// always writes (no omitempty).
func jsonFields(t *testing.T, typ reflect.Type) (all, always []string) {
	t.Helper()
	require.Equal(t, reflect.Struct, typ.Kind(), typ.String())
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		require.False(t, f.Anonymous, "%s.%s: embedded fields are not handled", typ, f.Name)
		if name == "-" {
			continue
		}
		require.NotEmpty(t, name, "%s.%s has no json name", typ, f.Name)
		all = append(all, name)
		if !slices.Contains(strings.Split(opts, ","), "omitempty") && !slices.Contains(strings.Split(opts, ","), "omitzero") {
			always = append(always, name)
		}
	}
	slices.Sort(all)
	slices.Sort(always)
	return all, always
}

// encodedKeys returns the sorted top-level keys of the JSON encoding of v.
func encodedKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	return slices.Sorted(maps.Keys(m))
}

func TestSchemaFiles(t *testing.T) {
	t.Parallel()

	t.Run("EveryTypeHasASchema", func(t *testing.T) {
		t.Parallel()
		for _, typ := range event.Types() {
			_, err := fs.Stat(schemas.FS, schemas.EventPath(typ))
			require.NoError(t, err, "event type %s has no schema file", typ)
		}
	})

	t.Run("NoSchemaForAnUnknownType", func(t *testing.T) {
		t.Parallel()
		entries, err := fs.ReadDir(schemas.FS, "events")
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		var want []string
		for _, typ := range event.Types() {
			want = append(want, string(typ)+".json")
		}
		require.ElementsMatch(t, want, names)
	})

	t.Run("Headers", func(t *testing.T) {
		t.Parallel()
		paths := []string{"defs.json", schemas.EnvelopePath}
		for _, typ := range event.Types() {
			paths = append(paths, schemas.EventPath(typ))
		}
		for _, p := range paths {
			s := rawSchema(t, p)
			require.Equal(t, "https://json-schema.org/draft/2020-12/schema", s["$schema"], p)
			require.Equal(t, schemas.BaseURL+p, s["$id"], p)
			require.NotEmpty(t, s["title"], p)
			require.NotEmpty(t, s["description"], p)
			if dir, name := path.Split(p); dir == "events/" {
				require.Equal(t, strings.TrimSuffix(name, ".json"), s["title"], p)
				require.Equal(t, "object", s["type"], p)
			}
		}
	})

	t.Run("EveryPropertyIsDescribed", func(t *testing.T) {
		t.Parallel()
		var check func(loc string, schema map[string]any)
		check = func(loc string, schema map[string]any) {
			for _, key := range []string{"properties", "$defs"} {
				named, _ := schema[key].(map[string]any)
				for name, sub := range named {
					where := loc + "/" + key + "/" + name
					m := object(t, sub, where)
					desc, _ := m["description"].(string)
					require.NotEmpty(t, desc, "%s has no description", where)
					check(where, m)
				}
			}
		}
		check("defs.json", rawSchema(t, "defs.json"))
		check(schemas.EnvelopePath, rawSchema(t, schemas.EnvelopePath))
		for _, typ := range event.Types() {
			check(schemas.EventPath(typ), rawSchema(t, schemas.EventPath(typ)))
		}
	})

	t.Run("Compile", func(t *testing.T) {
		t.Parallel()
		c := compile(t)
		require.NotNil(t, c.envelope)
		require.Len(t, c.payloads, len(event.Types()))
	})
}

func TestPropertiesMatchGoTypes(t *testing.T) {
	t.Parallel()

	t.Run("Events", func(t *testing.T) {
		t.Parallel()
		for _, typ := range event.Types() {
			t.Run(string(typ), func(t *testing.T) {
				t.Parallel()
				props, required := propertyNames(t, rawSchema(t, schemas.EventPath(typ)))
				all, always := jsonFields(t, reflect.TypeOf(event.New(typ)).Elem())
				require.Equal(t, all, props, "schema properties differ from the JSON fields of the Go type")
				require.Equal(t, always, required, "schema required list differs from the fields Go always writes")
			})
		}
	})

	t.Run("Definitions", func(t *testing.T) {
		t.Parallel()
		goTypes := map[string]reflect.Type{
			"error_info":      reflect.TypeFor[event.ErrorInfo](),
			"spec":            reflect.TypeFor[event.Spec](),
			"parent_ref":      reflect.TypeFor[event.ParentRef](),
			"step_spec":       reflect.TypeFor[event.StepSpec](),
			"cancelled_step":  reflect.TypeFor[event.CancelledStep](),
			"child_spec":      reflect.TypeFor[event.ChildSpec](),
			"attribute_value": reflect.TypeFor[event.AttributeValue](),
			"debounce":        reflect.TypeFor[event.Debounce](),
			"start_policy":    reflect.TypeFor[event.StartPolicy](),
			"flow_control":    reflect.TypeFor[event.FlowControl](),
		}
		defs := object(t, rawSchema(t, "defs.json")["$defs"], "$defs")
		for name, def := range defs {
			def := object(t, def, name)
			if def["type"] != "object" || def["properties"] == nil {
				continue // a map (attributes) has no fixed properties
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				props, required := propertyNames(t, def)
				if name == "retry_policy" {
					// RetryPolicy encodes through MarshalJSON: non_retryable is omitted when empty.
					always := encodedKeys(t, event.RetryPolicy{}.Normalize())
					all := append(slices.Clone(always), "non_retryable")
					slices.Sort(all)
					require.Equal(t, all, props)
					require.Equal(t, always, required)
					return
				}
				typ, ok := goTypes[name]
				require.True(t, ok, "object definition %s is not mapped to a Go type in this test", name)
				all, always := jsonFields(t, typ)
				require.Equal(t, all, props, "schema properties differ from the JSON fields of %s", typ)
				require.Equal(t, always, required, "schema required list differs from the fields %s always writes", typ)
			})
		}
	})

	t.Run("EnvelopeTypes", func(t *testing.T) {
		t.Parallel()
		env := rawSchema(t, schemas.EnvelopePath)
		props, required := propertyNames(t, env)
		want := []string{"data", "run_id", "seq", "time", "type"}
		require.Equal(t, want, props)
		require.Equal(t, want, required)

		var enum []string
		for _, v := range object(t, object(t, env["properties"], "properties")["type"], "type")["enum"].([]any) {
			enum = append(enum, v.(string))
		}
		var types []string
		for _, typ := range event.Types() {
			types = append(types, string(typ))
		}
		require.Equal(t, types, enum)

		var conditioned []string
		for _, c := range env["allOf"].([]any) {
			c := object(t, c, "allOf entry")
			typ := object(t, object(t, object(t, c["if"], "if")["properties"], "if properties")["type"], "if type")["const"].(string)
			ref := object(t, object(t, object(t, c["then"], "then")["properties"], "then properties")["data"], "then data")["$ref"]
			require.Equal(t, schemas.EventPath(event.Type(typ)), ref)
			conditioned = append(conditioned, typ)
		}
		require.Equal(t, types, conditioned)
	})
}

// goConstants returns the values of the string constants of type typeName declared in the Go
// source of package event.
func goConstants(t *testing.T, typeName string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "pkg", "event", "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var values []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typeName {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					require.True(t, ok && lit.Kind == token.STRING, "a %s constant is not a string literal", typeName)
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					values = append(values, s)
				}
			}
		}
	}
	return values
}

func TestEnumsMatchGoConstants(t *testing.T) {
	t.Parallel()
	defs := object(t, rawSchema(t, "defs.json")["$defs"], "$defs")
	for _, tc := range []struct {
		def, goType string
		known       []string
	}{
		{"cause", "Cause", []string{string(event.CauseWorkflow), string(event.CauseStepExhausted), string(event.CauseCancelRequested), string(event.CauseOperator), string(event.CauseFlowControl), string(event.CauseTimeout)}},
		{"outcome", "Outcome", []string{string(event.OutcomeCompleted), string(event.OutcomeFailed), string(event.OutcomeCancelled), string(event.OutcomeContinuedAsNew)}},
		{"cancel_policy", "CancelPolicy", []string{string(event.CancelPolicyRequest), string(event.CancelPolicyAbandon)}},
		{"exhaustion", "Exhaustion", []string{string(event.ExhaustionFailRun), string(event.ExhaustionReturnError), string(event.ExhaustionPauseRun)}},
		{"pause_cause", "PauseCause", []string{string(event.PauseOperator), string(event.PauseStepExhausted)}},
		{"attribute_type", "AttributeType", func() (out []string) {
			for _, t := range event.AttributeTypes() {
				out = append(out, string(t))
			}
			return out
		}()},
		{"conflict_policy", "ConflictPolicy", []string{string(event.ConflictFail), string(event.ConflictUseExisting), string(event.ConflictTerminateExisting)}},
		{"reuse_policy", "ReusePolicy", []string{string(event.ReuseRefuse), string(event.ReuseAllow), string(event.ReuseAllowFailedOnly)}},
	} {
		t.Run(tc.def, func(t *testing.T) {
			t.Parallel()
			var enum []string
			for _, v := range object(t, defs[tc.def], tc.def)["enum"].([]any) {
				enum = append(enum, v.(string))
			}
			consts := goConstants(t, tc.goType)
			require.ElementsMatch(t, consts, enum, "enum differs from the %s constants in pkg/event", tc.goType)
			require.ElementsMatch(t, tc.known, consts)
		})
	}
}

func TestExamplesValidate(t *testing.T) {
	t.Parallel()
	c := compile(t)
	covered := make(map[event.Type]map[string]bool)
	for _, ex := range examples() {
		typ := ex.payload.EventType()
		require.NoError(t, ex.payload.Validate(), "%s example is not valid Go", typ)
		data, err := json.Marshal(ex.payload)
		require.NoError(t, err)
		if covered[typ] == nil {
			covered[typ] = make(map[string]bool)
		}
		for _, k := range encodedKeys(t, ex.payload) {
			covered[typ][k] = true
		}

		t.Run(string(typ)+"/"+ex.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, validate(t, c.payloads[typ], data), "payload: %s", data)

			env := event.Envelope{RunID: "order-1=ship", Seq: 7, Time: at, Payload: ex.payload}
			b, err := json.Marshal(env)
			require.NoError(t, err)
			require.NoError(t, validate(t, c.envelope, b), "envelope: %s", b)

			var got event.Envelope
			require.NoError(t, json.Unmarshal(b, &got))
			require.Equal(t, env.RunID, got.RunID)
			require.Equal(t, env.Seq, got.Seq)
			require.True(t, env.Time.Equal(got.Time), "time %s != %s", got.Time, env.Time)
			require.Equal(t, ex.payload, got.Payload)
		})
	}

	t.Run("EveryFieldIsExercised", func(t *testing.T) {
		t.Parallel()
		for _, typ := range event.Types() {
			props, _ := propertyNames(t, rawSchema(t, schemas.EventPath(typ)))
			require.Equal(t, props, slices.Sorted(maps.Keys(covered[typ])), "the %s examples do not set every field", typ)
		}
	})
}

func TestMinimalPayloads(t *testing.T) {
	t.Parallel()
	c := compile(t)
	seen := make(map[event.Type]bool)
	for _, p := range minimal() {
		typ := p.EventType()
		seen[typ] = true
		t.Run(string(typ), func(t *testing.T) {
			t.Parallel()
			require.NoError(t, p.Validate())
			data, err := json.Marshal(p)
			require.NoError(t, err)
			require.NoError(t, validate(t, c.payloads[typ], data), "payload: %s", data)

			_, required := propertyNames(t, rawSchema(t, schemas.EventPath(typ)))
			require.Equal(t, required, encodedKeys(t, p), "a minimal payload writes exactly the required fields")

			got, err := event.DecodePayload(typ, data)
			require.NoError(t, err)
			require.Equal(t, p, got)
		})
	}
	require.Len(t, seen, len(event.Types()))
}

func TestMissingRequiredField(t *testing.T) {
	t.Parallel()
	c := compile(t)
	first := make(map[event.Type]event.Payload)
	for _, ex := range examples() {
		if _, ok := first[ex.payload.EventType()]; !ok {
			first[ex.payload.EventType()] = ex.payload
		}
	}
	for _, typ := range event.Types() {
		_, required := propertyNames(t, rawSchema(t, schemas.EventPath(typ)))
		for _, key := range required {
			t.Run(string(typ)+"/without_"+key, func(t *testing.T) {
				t.Parallel()
				data, err := json.Marshal(first[typ])
				require.NoError(t, err)
				var m map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(data, &m))
				require.Contains(t, m, key)
				delete(m, key)
				data, err = json.Marshal(m)
				require.NoError(t, err)

				require.Error(t, validate(t, c.payloads[typ], data), "payload without %s: %s", key, data)

				_, err = event.DecodePayload(typ, data)
				if slices.Contains(goAcceptsMissing[typ], key) {
					require.NoError(t, err, "Go now rejects %s without %s: update goAcceptsMissing", typ, key)
				} else {
					require.ErrorIs(t, err, event.ErrMalformed, "Go accepts %s without %s", typ, key)
				}
			})
		}
	}
}

// mutate decodes the JSON encoding of p, applies f to it and encodes it again.
func mutate(t *testing.T, p event.Payload, f func(m map[string]any)) []byte {
	t.Helper()
	data, err := json.Marshal(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	f(m)
	data, err = json.Marshal(m)
	require.NoError(t, err)
	return data
}

func at0(m map[string]any, key string) map[string]any {
	return m[key].([]any)[0].(map[string]any)
}

func retryOf(m map[string]any) map[string]any { return at0(m, "steps")["retry"].(map[string]any) }

func TestInvalidPayloads(t *testing.T) {
	t.Parallel()
	c := compile(t)
	ex := make(map[event.Type]event.Payload)
	for _, e := range examples() {
		if _, ok := ex[e.payload.EventType()]; !ok {
			ex[e.payload.EventType()] = e.payload
		}
	}
	for _, tc := range []struct {
		name string
		typ  event.Type
		f    func(m map[string]any)
	}{
		{"UnknownCause", event.TypeRunFailed, func(m map[string]any) { m["cause"] = "nobody" }},
		{"EmptyCause", event.TypeRunCancelled, func(m map[string]any) { m["cause"] = "" }},
		{"StepCancelledUnknownCause", event.TypeStepCancelled, func(m map[string]any) { m["cause"] = "gremlins" }},
		{"ChildContinuedAsNew", event.TypeChildSettled, func(m map[string]any) { m["outcome"] = "continued_as_new" }},
		{"UnknownOutcome", event.TypeChildSettled, func(m map[string]any) { m["outcome"] = "done" }},
		{"EmptyCancelPolicy", event.TypeChildScheduled, func(m map[string]any) { at0(m, "children")["cancel_policy"] = "" }},
		{"UnknownCancelPolicy", event.TypeChildScheduled, func(m map[string]any) { at0(m, "children")["cancel_policy"] = "kill" }},
		{"ChildWithoutDefinition", event.TypeChildScheduled, func(m map[string]any) { delete(at0(m, "children"), "definition") }},
		{"NoChildren", event.TypeChildScheduled, func(m map[string]any) { m["children"] = []any{} }},
		{"UnknownExhaustion", event.TypeStepScheduled, func(m map[string]any) { retryOf(m)["on_exhaustion"] = "retry_forever" }},
		{"ProseDuration", event.TypeStepScheduled, func(m map[string]any) { retryOf(m)["initial_interval"] = "1 second" }},
		{"NumericDuration", event.TypeStepScheduled, func(m map[string]any) { retryOf(m)["max_interval"] = 60 }},
		{"NegativeInterval", event.TypeStepScheduled, func(m map[string]any) { retryOf(m)["initial_interval"] = "-1s" }},
		{"NoAttempts", event.TypeStepScheduled, func(m map[string]any) { retryOf(m)["max_attempts"] = 0 }},
		{"ShrinkingBackoff", event.TypeStepScheduled, func(m map[string]any) { retryOf(m)["backoff_coefficient"] = 0.5 }},
		{"RetryWithoutMaxAttempts", event.TypeStepScheduled, func(m map[string]any) { delete(retryOf(m), "max_attempts") }},
		{"StepWithoutRetry", event.TypeStepScheduled, func(m map[string]any) { delete(at0(m, "steps"), "retry") }},
		{"StepWithoutName", event.TypeStepScheduled, func(m map[string]any) { at0(m, "steps")["name"] = "" }},
		{"NoSteps", event.TypeStepScheduled, func(m map[string]any) { m["steps"] = []any{} }},
		{"CancelledStepAttemptZero", event.TypeStepCancelled, func(m map[string]any) { at0(m, "steps")["attempt"] = 0 }},
		{"AttemptZero", event.TypeStepCompleted, func(m map[string]any) { m["attempt"] = 0 }},
		{"EmptyStepID", event.TypeStepCompleted, func(m map[string]any) { m["step_id"] = "" }},
		{"ProseDeadline", event.TypeWaitScheduled, func(m map[string]any) { m["deadline"] = "tomorrow" }},
		{"DurationWithoutUnit", event.TypeWaitScheduled, func(m map[string]any) { m["duration"] = "90" }},
		{"NullDuration", event.TypeWaitScheduled, func(m map[string]any) { m["duration"] = nil }},
		{"SpecWithoutDefinition", event.TypeRunStarted, func(m map[string]any) { delete(m["spec"].(map[string]any), "definition") }},
		{"ParentWithoutChildID", event.TypeRunStarted, func(m map[string]any) { delete(m["parent"].(map[string]any), "child_id") }},
		{"EmptySeed", event.TypeRunStarted, func(m map[string]any) { m["seed"] = "" }},
		{"EmptyErrorMessage", event.TypeStepFailed, func(m map[string]any) { m["error"].(map[string]any)["message"] = "" }},
		{"ErrorAsString", event.TypeRunFailed, func(m map[string]any) { m["error"] = "boom" }},
		{"EmptyDeliveryID", event.TypeSignalReceived, func(m map[string]any) { m["delivery_id"] = "" }},
		{"EmptyToken", event.TypeHookCreated, func(m map[string]any) { m["token"] = "" }},
		{"EmptyDetail", event.TypeDecisionFailed, func(m map[string]any) { m["detail"] = "" }},
		{"EmptySuccessor", event.TypeRunContinuedAsNew, func(m map[string]any) { m["successor_run_id"] = "" }},
	} {
		t.Run(string(tc.typ)+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			data := mutate(t, ex[tc.typ], tc.f)
			require.Error(t, validate(t, c.payloads[tc.typ], data), "schema accepts %s", data)
			_, err := event.DecodePayload(tc.typ, data)
			require.Error(t, err, "Go accepts %s", data)
		})
	}
}

func TestDurationPattern(t *testing.T) {
	t.Parallel()
	c := compile(t)
	var cases []string
	for _, d := range []time.Duration{0, 1, 1500, 250 * time.Millisecond, time.Second, 90 * time.Second,
		2*time.Hour + 45*time.Minute + 500*time.Millisecond, -time.Minute, 1<<63 - 1, -1 << 63} {
		cases = append(cases, d.String())
	}
	cases = append(cases, "0", "+0", "-0", "+1h", ".5s", "1.s", "1us", "1\u00b5s", "1\u03bcs", "1h1h", "1m1h",
		"", "1", "90", "s", "1d", "1 s", " 1s", "1s ", "1h-1m", "1.5.5s", "1S", "1e3s", ".s", "1ms1", "--1s")
	for _, s := range cases {
		t.Run(strconv.Quote(s), func(t *testing.T) {
			t.Parallel()
			data := mutate(t, &event.WaitScheduled{WaitID: "w", Deadline: at}, func(m map[string]any) { m["duration"] = s })
			_, goErr := event.DecodePayload(event.TypeWaitScheduled, data)
			err := validate(t, c.payloads[event.TypeWaitScheduled], data)
			if goErr == nil {
				require.NoError(t, err, "Go accepts duration %q, the schema does not", s)
			} else {
				require.Error(t, err, "Go refuses duration %q (%v), the schema accepts it", s, goErr)
			}
		})
	}
}

func TestInvalidEnvelopes(t *testing.T) {
	t.Parallel()
	c := compile(t)
	valid := func() map[string]any {
		return map[string]any{"run_id": "order-1", "seq": 2, "time": "2026-11-30T09:00:00Z", "type": "step.completed",
			"data": map[string]any{"step_id": "charge", "attempt": 1, "output": nil}}
	}
	b, err := json.Marshal(valid())
	require.NoError(t, err)
	require.NoError(t, validate(t, c.envelope, b))

	for _, tc := range []struct {
		name string
		f    func(m map[string]any)
	}{
		{"UnknownType", func(m map[string]any) { m["type"] = "step.exploded" }},
		{"NoType", func(m map[string]any) { delete(m, "type") }},
		{"DataOfAnotherType", func(m map[string]any) { m["type"] = "run.started" }},
		{"DataMissingField", func(m map[string]any) { delete(m["data"].(map[string]any), "step_id") }},
		{"NullData", func(m map[string]any) { m["data"] = nil }},
		{"NoData", func(m map[string]any) { delete(m, "data") }},
		{"SeqZero", func(m map[string]any) { m["seq"] = 0 }},
		{"NoRunID", func(m map[string]any) { delete(m, "run_id") }},
		{"EmptyRunID", func(m map[string]any) { m["run_id"] = "" }},
		{"NoTime", func(m map[string]any) { delete(m, "time") }},
		{"ProseTime", func(m map[string]any) { m["time"] = "Monday morning" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := valid()
			tc.f(m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			require.Error(t, validate(t, c.envelope, b), "schema accepts %s", b)
			var e event.Envelope
			require.Error(t, json.Unmarshal(b, &e), "Go accepts %s", b)
		})
	}
}

func TestValidateRejectsMalformedJSON(t *testing.T) {
	t.Parallel()
	c := compile(t)
	for _, data := range []string{``, `{`, `{"step_id":"a"} {}`, `nul`} {
		t.Run(strconv.Quote(data), func(t *testing.T) {
			t.Parallel()
			require.Error(t, validate(t, c.payloads[event.TypeStepCompleted], []byte(data)))
		})
	}
	require.NoError(t, validate(t, c.payloads[event.TypeStepCompleted], []byte(" {\"step_id\":\"a\",\"attempt\":1,\"output\":1}\n")))
}
