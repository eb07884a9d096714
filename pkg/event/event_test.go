package event_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
)

func TestEnvelopeDecodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want error
		msg  string
	}{
		{"NotJSON", `{"run_id":`, event.ErrMalformed, "unexpected end of JSON input"},
		{"UnknownType", `{"run_id":"r","seq":1,"time":"2026-11-30T09:00:00Z","type":"step.teleported","data":{}}`, event.ErrUnknownType, `"step.teleported"`},
		{"MissingType", `{"run_id":"r","seq":1,"time":"2026-11-30T09:00:00Z","data":{}}`, event.ErrMalformed, "the type field is missing"},
		{"MissingData", `{"run_id":"r","seq":1,"time":"2026-11-30T09:00:00Z","type":"wait.fired"}`, event.ErrMalformed, "wait.fired has no data object"},
		{"DataNotObject", `{"run_id":"r","seq":1,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":[1]}`, event.ErrMalformed, "wait.fired data"},
		{"MissingRequiredField", `{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"step.completed","data":{"attempt":1,"output":1}}`, event.ErrMalformed, `field "step_id" is required`},
		{"BadAttempt", `{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"step.completed","data":{"step_id":"a","attempt":0,"output":1}}`, event.ErrMalformed, `field "attempt" must be at least 1`},
		{"BadEnum", `{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"run.failed","data":{"error":{"message":"x"},"cause":"nobody"}}`, event.ErrMalformed, `got "nobody"`},
		{"BadDuration", `{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.scheduled","data":{"wait_id":"w","deadline":"2026-11-30T09:00:00Z","duration":"soon"}}`, event.ErrMalformed, "soon"},
		{"MissingRunID", `{"seq":1,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}`, event.ErrMalformed, "has no run_id"},
		{"ZeroSeq", `{"run_id":"r","time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}`, event.ErrMalformed, "sequences start at 1"},
		{"MissingTime", `{"run_id":"r","seq":1,"type":"wait.fired","data":{"wait_id":"w"}}`, event.ErrMalformed, "has no time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := event.Decode([]byte(tt.in))
			require.ErrorIs(t, err, tt.want)
			require.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	in := event.Envelope{RunID: "order-1", Seq: 3, Time: time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.FixedZone("CST", 8*3600)),
		Payload: &event.StepRetryScheduled{StepID: "charge", Attempt: 2, Due: time.Date(2026, 11, 30, 1, 0, 1, 0, time.UTC)}}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	require.Contains(t, string(b), `"time":"2026-11-30T01:00:00.123456789Z"`, "times are stored in UTC")
	require.Contains(t, string(b), `"type":"step.retry_scheduled"`)
	var out event.Envelope
	require.NoError(t, json.Unmarshal(b, &out))
	require.True(t, in.Time.Equal(out.Time))
	require.Equal(t, in.Payload, out.Payload)

	_, err = json.Marshal(event.Envelope{RunID: "r", Seq: 1})
	require.ErrorIs(t, err, event.ErrMalformed)
}

func TestIDs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		id      string
		run     bool
		derived bool
		dec     bool
	}{
		{"order-2026-0001", true, true, true},
		{"Order_1", true, true, true},
		{"1st", true, true, false},
		{"a.b", false, false, false},
		{"a*", false, false, false},
		{"a>", false, false, false},
		{"a b", false, false, false},
		{"a\tb", false, false, false},
		{"", false, false, false},
		{"p=child", false, true, false},
		{"p=child=2", false, true, false},
		{strings.Repeat("x", 129), false, false, false},
		{"é", false, false, false},
	} {
		require.Equal(t, tt.run, event.ValidateRunID(tt.id) == nil, "run ID %q", tt.id)
		require.Equal(t, tt.derived, event.ValidateDerivedRunID(tt.id) == nil, "derived run ID %q", tt.id)
		require.Equal(t, tt.dec, event.ValidateID("step", tt.id) == nil, "decision ID %q", tt.id)
	}
	err := event.ValidateRunID("orders.2026")
	require.ErrorIs(t, err, event.ErrInvalidID)
	require.EqualError(t, err, `flow: invalid ID: run ID "orders.2026" has '.' at position 6; use letters, digits, '-' or '_' (a run ID becomes a NATS subject token)`)
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	p := event.RetryPolicy{NonRetryable: []string{"b", "a", "b"}}.Normalize()
	require.Equal(t, event.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, BackoffCoefficient: 2, MaxInterval: time.Minute,
		NonRetryable: []string{"a", "b"}, OnExhaustion: event.ExhaustionFailRun}, p)
	require.True(t, p.Equal(event.RetryPolicy{NonRetryable: []string{"a", "b"}}))
	require.False(t, p.Equal(event.RetryPolicy{MaxAttempts: 4, NonRetryable: []string{"a", "b"}}))
	require.Equal(t, []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second},
		[]time.Duration{p.Backoff(1), p.Backoff(2), p.Backoff(3), p.Backoff(4)})
	require.Equal(t, time.Minute, p.Backoff(60), "capped, without overflow")
	require.False(t, p.Retryable("a"))
	require.True(t, p.Retryable("timeout"))
	require.Equal(t, 10*time.Minute, event.RetryPolicy{InitialInterval: 10 * time.Minute}.Normalize().MaxInterval)

	b, err := json.Marshal(p)
	require.NoError(t, err)
	require.JSONEq(t, `{"max_attempts":3,"initial_interval":"1s","backoff_coefficient":2,"max_interval":"1m0s","non_retryable":["a","b"],"on_exhaustion":"fail_run"}`, string(b))
	var back event.RetryPolicy
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, p, back)

	require.ErrorContains(t, event.RetryPolicy{MaxAttempts: -1}.Normalize().Validate(), "retry.max_attempts must be at least 1")
	require.ErrorContains(t, event.RetryPolicy{InitialInterval: time.Minute, MaxInterval: time.Second}.Normalize().Validate(), "must not be less than")
	require.ErrorContains(t, event.RetryPolicy{OnExhaustion: "explode"}.Normalize().Validate(), "retry.on_exhaustion")
}

// FuzzEnvelope: decoding arbitrary bytes returns an envelope or an error, never panics, and a
// decoded envelope encodes and decodes to the same.
func FuzzEnvelope(f *testing.F) {
	f.Add([]byte(`{"run_id":"r","seq":1,"time":"2026-11-30T09:00:00Z","type":"run.started","data":{"spec":{"definition":"d"},"input":{},"seed":"s"}}`))
	f.Add([]byte(`{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"step.scheduled","data":{"steps":[{"id":"a","name":"n","input":1,"retry":{"max_attempts":1,"initial_interval":"1s","backoff_coefficient":1,"max_interval":"1s","on_exhaustion":"fail_run"}}]}}`))
	f.Add([]byte(`{"type":"wait.scheduled","data":{"wait_id":"w","deadline":"2026-11-30T09:00:00Z","duration":"1h"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e event.Envelope
		if json.Unmarshal(b, &e) != nil {
			return
		}
		again, err := json.Marshal(e)
		require.NoError(t, err)
		var back event.Envelope
		require.NoError(t, json.Unmarshal(again, &back))
		require.Equal(t, e.Type(), back.Type())
	})
}

// Envelope.MarshalJSON writes the bytes encoding/json writes for the envelope's fields.
func TestEnvelopeEncodingMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, runID := range []string{"order-1", "p=child=2", `odd "id" <&> é`} {
		env := event.Envelope{RunID: runID, Seq: 42, Time: time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.FixedZone("x", 3600)),
			Payload: &event.SignalReceived{Name: "go", Payload: json.RawMessage(`{"a":[1,2]}`), DeliveryID: "d"}}
		got, err := json.Marshal(env)
		require.NoError(t, err)
		data, err := json.Marshal(env.Payload)
		require.NoError(t, err)
		want, err := json.Marshal(struct {
			RunID string          `json:"run_id"`
			Seq   uint64          `json:"seq"`
			Time  time.Time       `json:"time"`
			Type  event.Type      `json:"type"`
			Data  json.RawMessage `json:"data"`
		}{runID, 42, env.Time.UTC(), env.Type(), data})
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
