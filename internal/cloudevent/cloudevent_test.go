package cloudevent_test

import (
	"bytes"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/cloudevent"
)

// WriteHeaders writes what the SDK's NATS binding writes for the same event, and the binding
// reads it back as the same event.
func TestWriteHeadersMatchesTheSDK(t *testing.T) {
	t.Parallel()
	ec := cloudevent.NewContext(cloudevent.Source("flow/worker/default"), "dev.flow.task.resume")
	ec.ID, *ec.Subject = "run-1:7", "run-1"
	ec.Time.Time = time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	ec.Extensions["flowseq"], ec.Extensions["flowtypes"] = "7", "step.completed,run.completed"
	data := []byte(`{"run_id":"run-1","seq":7}`)

	h := nats.Header{}
	cloudevent.WriteHeaders(ec, h, nil)
	got, err := binding.ToEvent(t.Context(), cenats.NewMessage(&nats.Msg{Header: h, Data: data}))
	require.NoError(t, err)
	require.NoError(t, got.Validate())

	want := ce.New()
	want.Context = ec.Clone()
	require.NoError(t, want.SetData(ce.ApplicationJSON, data))
	var body bytes.Buffer
	sdkHeader, err := cenats.WriteMsg(t.Context(), binding.ToMessage(&want), &body)
	require.NoError(t, err)
	require.Equal(t, sdkHeader, h, "the same headers as the SDK's writer")
	require.Equal(t, want.Context.AsV1(), got.Context.AsV1())
	require.JSONEq(t, string(data), string(got.Data()))
}
