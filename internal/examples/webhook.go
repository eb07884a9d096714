package examples

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"

	"github.com/flowrun/flow/pkg/flow"
)

// WebhookHook is the ID of the hook the webhook workflow creates.
const WebhookHook = "callback"

// announceStep is the ID of the webhook workflow's step that announces the callback URL.
const announceStep = "announce-hook"

// WebhookResult is the output of the webhook workflow: {"received": <the delivered payload>}.
type WebhookResult struct {
	Received json.RawMessage `json:"received"`
}

// HookAnnouncement is the input of the announceHook step: the hook and its token.
type HookAnnouncement struct {
	Hook  string `json:"hook"`
	Token string `json:"token"`
}

// Webhook creates the hook "callback" (WebhookHook), then runs the step announceHook, whose
// output is the hook's callback URL (so that `flow status` and `flow history` show it), and
// completes with the one payload delivered to the hook. Its input is ignored.
//
// The hook is created before the URL is announced, so that a delivery to an announced URL
// always finds the hook. The step's input is the recorded token, not the URL: the base URL is
// configuration of the worker ([Options.HookBaseURL]), which may change between deploys, and
// the workflow's decisions must not depend on it. A delivery that arrives while the
// announcement is still running completes the run all the same (the step is cancelled).
func Webhook(ctx *flow.Context, _ any) (flow.Decision, error) {
	if payload := ctx.Hook(WebhookHook); payload != nil {
		return ctx.Complete(WebhookResult{Received: payload}), nil
	}
	if ctx.Snapshot().Hooks[WebhookHook] == nil {
		return ctx.CreateHook(WebhookHook, nil), nil
	}
	if _, ok, err := flow.Output[string](ctx, announceStep); err != nil || !ok {
		return ctx.ScheduleStep(announceStep, "announceHook", HookAnnouncement{Hook: WebhookHook, Token: ctx.HookToken(WebhookHook)}), err
	}
	// Re-issuing the recorded hook keeps the run waiting for its delivery.
	return ctx.CreateHook(WebhookHook, nil), nil
}

// Announcer is the announceHook step: it tells whoever should call back where to deliver.
type Announcer struct {
	// BaseURL is where hook deliveries are received; see [Options.HookBaseURL].
	BaseURL string
	// Logger receives the announcement at info level.
	Logger *slog.Logger
}

// AnnounceHook logs the callback URL of in's hook at info level and returns it. An empty token
// is a non-retryable error of kind flow.KindInvalidInput.
func (a Announcer) AnnounceHook(ctx context.Context, in HookAnnouncement) (string, error) {
	if in.Token == "" {
		return "", flow.NonRetryable(flow.NewError(flow.KindInvalidInput, "the announcement names no hook token"))
	}
	u := HookURL(a.BaseURL, in.Token)
	info, _ := flow.StepInfoFrom(ctx)
	a.Logger.InfoContext(ctx, "deliver to the hook at its callback URL",
		slog.String("run_id", info.RunID), slog.String("hook", in.Hook), slog.String("url", u))
	return u, nil
}

// HookURL returns the callback URL of the hook with token: "<base>/v1/hooks/<token>", the
// token path-escaped, a trailing slash of base dropped.
func HookURL(base, token string) string {
	return strings.TrimRight(base, "/") + "/v1/hooks/" + url.PathEscape(token)
}
