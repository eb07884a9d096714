package examples_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/examples"
	"github.com/flowrun/flow/internal/syncbuf"
	"github.com/flowrun/flow/pkg/flow"
)

// records decodes the JSON log lines written to logs so far.
func records(t *testing.T, logs *syncbuf.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	dec := json.NewDecoder(strings.NewReader(logs.String()))
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		recs = append(recs, r)
	}
	return recs
}

func TestWebhook(t *testing.T) {
	t.Parallel()

	t.Run("AnnouncesTheURLAndCompletesWithTheDelivery", func(t *testing.T) {
		t.Parallel()
		var logs syncbuf.Buffer
		b := setup(t, examples.Options{HookBaseURL: "https://hooks.example.test/", Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		runID := b.start(t, "webhook", nil, "payment-1")
		s := b.snapshot(t, runID)
		require.Equal(t, flow.StatusSuspended, s.Status)
		token := s.Hooks[examples.WebhookHook].Token
		require.NotEmpty(t, token)
		url := "https://hooks.example.test/v1/hooks/" + token

		announce := s.Steps["announce-hook"]
		require.Equal(t, core.StepCompleted, announce.Status)
		require.Greater(t, announce.BatchSeq, s.Hooks[examples.WebhookHook].Seq, "the URL is announced once the hook exists")
		require.JSONEq(t, `"`+url+`"`, string(announce.Output), "flow status shows the URL")

		recs := records(t, &logs)
		require.Len(t, recs, 1)
		require.Equal(t, "INFO", recs[0]["level"])
		require.Equal(t, url, recs[0]["url"])
		require.Equal(t, runID, recs[0]["run_id"])
		require.Equal(t, examples.WebhookHook, recs[0]["hook"])

		require.NoError(t, b.env.DeliverHook(b.ctx, token, map[string]string{"status": "paid"}))
		require.JSONEq(t, `{"received": {"status": "paid"}}`, b.output(t, runID))
		require.Equal(t, 1, b.env.StepCalls("announceHook"))
	})

	t.Run("DefaultBaseURL", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		runID := b.start(t, "webhook", nil, "payment-2")
		s := b.snapshot(t, runID)
		url := examples.DefaultHookBaseURL + "/v1/hooks/" + s.Hooks[examples.WebhookHook].Token
		require.JSONEq(t, `"`+url+`"`, string(s.Steps["announce-hook"].Output))
		require.Equal(t, "http://127.0.0.1:8421", examples.DefaultHookBaseURL)
	})

	t.Run("DeliveryDuringTheAnnouncementCompletesTheRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, examples.Options{})
		var token string
		b.env.OnStep("announceHook", func(_ context.Context, in json.RawMessage) (any, error) {
			var a examples.HookAnnouncement
			require.NoError(t, json.Unmarshal(in, &a))
			token = a.Token
			return nil, flow.NewError("unreachable", "the announcement did not get through")
		})
		runID := b.start(t, "webhook", nil, "payment-3")
		require.Equal(t, core.StepRetrying, b.snapshot(t, runID).Steps["announce-hook"].Status)
		require.NoError(t, b.env.DeliverHook(b.ctx, token, "hello"))
		require.JSONEq(t, `{"received": "hello"}`, b.output(t, runID))
		require.Equal(t, core.StepCancelled, b.snapshot(t, runID).Steps["announce-hook"].Status)
	})
}

func TestHookURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, base, token, want string }{
		{"Default", examples.DefaultHookBaseURL, "abc123", "http://127.0.0.1:8421/v1/hooks/abc123"},
		{"TrailingSlash", "https://hooks.example.test/", "abc123", "https://hooks.example.test/v1/hooks/abc123"},
		{"BasePath", "https://example.test/flow//", "t-1", "https://example.test/flow/v1/hooks/t-1"},
		{"EscapedToken", "http://h", "a/b c", "http://h/v1/hooks/a%2Fb%20c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, examples.HookURL(tt.base, tt.token))
		})
	}
}

func TestAnnounceHookRefusesAnEmptyToken(t *testing.T) {
	t.Parallel()
	a := examples.Announcer{BaseURL: examples.DefaultHookBaseURL, Logger: slog.New(slog.DiscardHandler)}
	_, err := a.AnnounceHook(t.Context(), examples.HookAnnouncement{Hook: "callback"})
	require.Error(t, err)
	require.Equal(t, flow.KindInvalidInput, flow.KindOf(err))
	require.True(t, flow.IsNonRetryable(err))
}
