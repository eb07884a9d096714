package event_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
)

func commitEnvelopes(runID string) []event.Envelope {
	at := time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.FixedZone("x", 3600))
	return []event.Envelope{
		{RunID: runID, Seq: 7, Time: at, Payload: &event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`{"s":"}{\"]","n":[1,{"x":null}]}`)}},
		{RunID: runID, Seq: 8, Time: at.Add(time.Millisecond), Payload: &event.SignalReceived{Name: "go", Payload: json.RawMessage(`"<&>"`), DeliveryID: "d"}},
		{RunID: runID, Seq: 9, Time: at.Add(time.Second), Payload: &event.WaitFired{WaitID: "w"}},
	}
}

// MarshalEnvelopes writes the bytes json.Marshal writes for the envelopes.
func TestMarshalEnvelopesMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, runID := range []string{"order-1", `odd "id" <&> é`} {
		for n := range 4 {
			envs := commitEnvelopes(runID)[:n]
			got, err := event.MarshalEnvelopes(envs)
			require.NoError(t, err)
			want, err := json.Marshal(envs)
			if n == 0 {
				want = []byte("[]") // json.Marshal of a nil slice is null
			}
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
	}
}

// decodeGeneral is the reference: encoding/json into []event.Envelope.
func decodeGeneral(b []byte) ([]event.Envelope, error) {
	var envs []event.Envelope
	err := json.Unmarshal(b, &envs)
	return envs, err
}

// requireSameDecoding checks that DecodeEnvelopes agrees with encoding/json on b: the same
// envelopes, or both an error.
func requireSameDecoding(t *testing.T, b []byte) {
	t.Helper()
	want, werr := decodeGeneral(b)
	got, gerr := event.DecodeEnvelopes(b)
	if werr != nil {
		require.Error(t, gerr, "encoding/json rejects %q: %v", b, werr)
		return
	}
	require.NoError(t, gerr, "encoding/json accepts %q", b)
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, want[i].RunID, got[i].RunID)
		require.Equal(t, want[i].Seq, got[i].Seq)
		require.True(t, want[i].Time.Equal(got[i].Time))
		require.Equal(t, want[i].Payload, got[i].Payload)
	}
}

func TestDecodeEnvelopesAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	written, err := event.MarshalEnvelopes(commitEnvelopes("order-1"))
	require.NoError(t, err)
	escaped, err := event.MarshalEnvelopes(commitEnvelopes(`odd "id" <&> é`))
	require.NoError(t, err)
	one := `{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}`
	for name, in := range map[string]string{
		"Written":          string(written),
		"Escaped":          string(escaped),
		"Empty":            `[]`,
		"Null":             `null`,
		"Spaced":           " [ {\n\"run_id\" : \"r\" , \"seq\" : 2 , \"time\" : \"2026-11-30T09:00:00Z\" , \"type\" : \"wait.fired\" , \"data\" : { \"wait_id\" : \"w\" } } ] ",
		"OtherKeyOrder":    `[{"seq":2,"run_id":"r","type":"wait.fired","time":"2026-11-30T09:00:00Z","data":{"wait_id":"w"}}]`,
		"UpperCaseKey":     `[{"RUN_ID":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}]`,
		"ExtraKey":         `[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"},"x":1}]`,
		"EscapedType":      `[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait\u002efired","data":{"wait_id":"w"}}]`,
		"Two":              "[" + one + "," + one + "]",
		"TrailingComma":    "[" + one + ",]",
		"TrailingGarbage":  "[" + one + "]x",
		"Unterminated":     "[" + one,
		"NullElement":      `[null]`,
		"SeqLeadingZero":   `[{"run_id":"r","seq":02,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}]`,
		"SeqFraction":      `[{"run_id":"r","seq":2.0,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}]`,
		"SeqNegative":      `[{"run_id":"r","seq":-2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}]`,
		"SeqOverflow":      `[{"run_id":"r","seq":18446744073709551616,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}]`,
		"BadTime":          `[{"run_id":"r","seq":2,"time":"yesterday","type":"wait.fired","data":{"wait_id":"w"}}]`,
		"DataUnbalanced":   `[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"]}]`,
		"DataInvalid":      `[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id" "w"}}]`,
		"DataNotObject":    `[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":"w"}]`,
		"DataOpenString":   `[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w}}]`,
		"ControlInRunID":   "[{\"run_id\":\"r\x01\",\"seq\":2,\"time\":\"2026-11-30T09:00:00Z\",\"type\":\"wait.fired\",\"data\":{\"wait_id\":\"w\"}}]",
		"InvalidUTF8RunID": "[{\"run_id\":\"r\xff\",\"seq\":2,\"time\":\"2026-11-30T09:00:00Z\",\"type\":\"wait.fired\",\"data\":{\"wait_id\":\"w\"}}]",
		"UnknownType":      `[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"step.teleported","data":{}}]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireSameDecoding(t, []byte(in))
		})
	}
}

func TestDecodeEnvelopesErrors(t *testing.T) {
	t.Parallel()
	_, err := event.DecodeEnvelopes([]byte(`[{"run_id":`))
	require.ErrorIs(t, err, event.ErrMalformed)
	_, err = event.DecodeEnvelopes([]byte(`[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"step.teleported","data":{}}]`))
	require.ErrorIs(t, err, event.ErrUnknownType)
	_, err = event.DecodeEnvelopes([]byte(`[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id" "w"}}]`))
	require.ErrorIs(t, err, event.ErrMalformed)
}

// FuzzDecodeEnvelopes: on any bytes, DecodeEnvelopes agrees with encoding/json.
func FuzzDecodeEnvelopes(f *testing.F) {
	written, err := event.MarshalEnvelopes(commitEnvelopes("order-1"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(written)
	f.Add([]byte(`[{"run_id":"r","seq":2,"time":"2026-11-30T09:00:00Z","type":"wait.fired","data":{"wait_id":"w"}}]`))
	f.Add([]byte(`[{"run_id":"r","seq":1,"time":"2026-11-30T09:00:00Z","type":"run.started","data":{"spec":{"definition":"d"},"input":{},"seed":"s"}}]`))
	f.Fuzz(func(t *testing.T, b []byte) { requireSameDecoding(t, b) })
}

// BenchmarkDecodeEnvelopes compares DecodeEnvelopes with encoding/json on a commit as written.
func BenchmarkDecodeEnvelopes(b *testing.B) {
	written, err := event.MarshalEnvelopes(commitEnvelopes("order-1"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("commit", func(b *testing.B) {
		for b.Loop() {
			if _, err := event.DecodeEnvelopes(written); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeGeneral(written); err != nil {
				b.Fatal(err)
			}
		}
	})
}
