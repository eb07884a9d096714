package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/services/history"
)

// A feed message is the message the CloudEvents SDK's NATS binding writes for the event, and
// reads back as the same event.
func TestFeedMessageIsTheBindingsBinaryMode(t *testing.T) {
	t.Parallel()
	env := event.Envelope{RunID: "order-1=pay", Seq: 7, Time: time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.UTC),
		Payload: &event.StepCompleted{StepID: "charge", Attempt: 2, Output: json.RawMessage(`{"ok":true}`)}}
	got, err := history.FeedMessage("order", env)
	require.NoError(t, err)
	require.Equal(t, "flow.events.order.order-1=pay.step.completed", got.Subject)

	want := ce.New()
	want.SetID("order-1=pay:7")
	want.SetSource(history.FeedSource)
	want.SetType("dev.flow.step.completed")
	want.SetSubject("order-1=pay")
	want.SetTime(env.Time)
	want.SetExtension(history.FeedExtSeq, "7")
	want.SetExtension(history.FeedExtDefinition, "order")
	data, err := json.Marshal(env.Payload)
	require.NoError(t, err)
	require.NoError(t, want.SetData(ce.ApplicationJSON, data))
	var body bytes.Buffer
	header, err := cenats.WriteMsg(context.Background(), binding.ToMessage(&want), &body)
	require.NoError(t, err)
	require.Equal(t, header, got.Header)
	require.JSONEq(t, body.String(), string(got.Data))

	read, err := binding.ToEvent(context.Background(), cenats.NewMessage(got))
	require.NoError(t, err)
	require.NoError(t, read.Validate())
	require.Equal(t, want.Context.AsV1(), read.Context.AsV1())
	require.JSONEq(t, string(want.Data()), string(read.Data()))
}
