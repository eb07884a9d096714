// Package examples holds the workflows `flow dev` registers for newcomers to try:
//
//   - order: three steps with idempotency keys and a retry policy;
//   - fanout: a batch of steps;
//   - reminder: a durable timer;
//   - approval: a signal raced against a deadline (a durable timer);
//   - webhook: a hook whose callback URL a step announces;
//   - parent: children of the workflow child, one under each cancellation policy.
//
// The step functions stand in for external systems that deduplicate by idempotency key. Zero
// input fields take example values; fanout, and the workflows that take a duration (reminder,
// approval, parent, child), fail with kind [flow.KindInvalidInput] on a value they cannot use,
// such as a malformed or non-positive duration.
package examples

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flowrun/flow/pkg/flow"
)

// DefaultHookBaseURL is the base of the callback URLs the webhook example announces when
// [Options.HookBaseURL] is empty: the ingress service's default HTTP address.
const DefaultHookBaseURL = "http://127.0.0.1:8421"

// Options adjust [RegisterWith]. The zero value works.
type Options struct {
	// HookBaseURL is where hook deliveries are received: the webhook example announces the
	// callback URL "<HookBaseURL>/v1/hooks/<token>" (a trailing slash of HookBaseURL is dropped).
	// Defaults to DefaultHookBaseURL.
	HookBaseURL string
	// Logger receives the webhook example's announcement, at info level. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Register adds the example workflows and steps to reg, with the default [Options].
func Register(reg *flow.Registry) { RegisterWith(reg, Options{}) }

// RegisterWith adds the example workflows order, fanout, reminder, approval, webhook, parent and
// child, and the steps they run, to reg. It panics, as [flow.RegisterWorkflow] does, if reg
// already holds one of their names.
func RegisterWith(reg *flow.Registry, o Options) {
	if o.HookBaseURL == "" {
		o.HookBaseURL = DefaultHookBaseURL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ledger := &Ledger{effects: map[string]string{}}
	// Search attributes a start may set (flow start order --attr customer=c-42); see docs/search.md.
	flow.RegisterWorkflow(reg, "order", Order, flow.WithSearchAttributes(flow.Keyword("customer"), flow.Int("amount"), flow.KeywordList("tags")))
	flow.RegisterStep(reg, "reserveStock", ledger.ReserveStock)
	flow.RegisterStep(reg, "chargePayment", ledger.ChargePayment)
	flow.RegisterStep(reg, "shipOrder", ledger.ShipOrder)

	flow.RegisterWorkflow(reg, "fanout", Fanout)
	flow.RegisterStep(reg, "processItem", ProcessItem)

	flow.RegisterWorkflow(reg, "reminder", Reminder)
	flow.RegisterStep(reg, "sendReminder", SendReminder)

	flow.RegisterWorkflow(reg, "approval", Approval)
	flow.RegisterQuery(reg, "approval", "status", ApprovalStatusQuery)
	registerApprovalUpdates(reg)

	flow.RegisterWorkflow(reg, "webhook", Webhook)
	flow.RegisterStep(reg, "announceHook", Announcer{BaseURL: o.HookBaseURL, Logger: o.Logger}.AnnounceHook)

	flow.RegisterWorkflow(reg, "parent", Parent)
	flow.RegisterWorkflow(reg, "child", Child)

	flow.RegisterWorkflow(reg, "invoice", Invoice) // pause on exhausted retries (docs/pause.md)
	flow.RegisterStep(reg, "computeTax", ComputeTax)
}

// positiveDuration parses s, or def when s is empty, as a positive Go duration. Otherwise it
// returns an error of kind flow.KindInvalidInput naming field and showing def as an example.
func positiveDuration(field, s, def string) (time.Duration, error) {
	if s == "" {
		s = def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, flow.NewError(flow.KindInvalidInput, fmt.Sprintf("%s must be a positive duration such as %q, got %q", field, def, s))
	}
	return d, nil
}

// OrderInput is the input of the order workflow. Zero fields take example values.
type OrderInput struct {
	SKU    string  `json:"sku"`
	Qty    int     `json:"qty"`
	Amount float64 `json:"amount"`
}

// OrderResult is the output of the order workflow.
type OrderResult struct {
	Reservation string `json:"reservation"`
	Charge      string `json:"charge"`
	Shipment    string `json:"shipment"`
}

// Order reserves stock, charges the payment and ships, one step after the other. Every step's
// effect carries an idempotency key "<run>:<step>:<resource>", so a step that runs twice (a
// worker died after the effect and before the commit) has its effect once.
func Order(ctx *flow.Context, in OrderInput) (flow.Decision, error) {
	if in.SKU == "" {
		in.SKU = "sku-8842"
	}
	if in.Qty == 0 {
		in.Qty = 1
	}
	if in.Amount == 0 {
		in.Amount = 42
	}
	var res OrderResult
	reservation, ok, err := flow.Output[string](ctx, "reserve-stock")
	if err != nil || !ok {
		return ctx.ScheduleStep("reserve-stock", "reserveStock", in), err
	}
	res.Reservation = reservation
	charge, ok, err := flow.Output[string](ctx, "charge-payment")
	if err != nil || !ok {
		return ctx.ScheduleStep("charge-payment", "chargePayment", in, flow.WithRetry(flow.RetryPolicy{
			MaxAttempts: 5, InitialInterval: 200 * time.Millisecond, MaxInterval: 5 * time.Second,
			NonRetryable: []string{"card_declined"},
		})), err
	}
	res.Charge = charge
	shipment, ok, err := flow.Output[string](ctx, "ship-order")
	if err != nil || !ok {
		return ctx.ScheduleStep("ship-order", "shipOrder", in), err
	}
	res.Shipment = shipment
	return ctx.Complete(res), nil
}

// Ledger stands in for the warehouse, payment and shipping systems: it applies each effect once
// per idempotency key.
type Ledger struct {
	mu      sync.Mutex
	effects map[string]string
}

func (l *Ledger) once(key, value string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.effects[key]; ok {
		return v
	}
	l.effects[key] = value
	return value
}

// ReserveStock reserves in.Qty of in.SKU.
func (l *Ledger) ReserveStock(ctx context.Context, in OrderInput) (string, error) {
	key := flow.IdempotencyKey(ctx, in.SKU)
	return l.once(key, fmt.Sprintf("reserved %d x %s (key %s)", in.Qty, in.SKU, key)), nil
}

// ChargePayment charges in.Amount. Its first attempt times out, to show a retry.
func (l *Ledger) ChargePayment(ctx context.Context, in OrderInput) (string, error) {
	info, _ := flow.StepInfoFrom(ctx)
	if info.Attempt == 1 {
		return "", flow.NewError("gateway_timeout", "the payment gateway did not answer in time")
	}
	key := flow.IdempotencyKey(ctx, "card")
	return l.once(key, fmt.Sprintf("charged %.2f (key %s)", in.Amount, key)), nil
}

// ShipOrder books the shipment.
func (l *Ledger) ShipOrder(ctx context.Context, in OrderInput) (string, error) {
	key := flow.IdempotencyKey(ctx, in.SKU)
	return l.once(key, fmt.Sprintf("shipped %d x %s (key %s)", in.Qty, in.SKU, key)), nil
}

// FanoutInput is the input of the fanout workflow.
type FanoutInput struct {
	// Items is the number of items to process in one batch. Defaults to 5.
	Items int `json:"items"`
}

// Fanout processes Items items as one batch of steps, then completes with the sum of their
// outputs.
func Fanout(ctx *flow.Context, in FanoutInput) (flow.Decision, error) {
	if in.Items == 0 {
		in.Items = 5
	}
	if in.Items < 0 || in.Items > 1000 {
		return ctx.Fail(flow.NewError("invalid_input", fmt.Sprintf("items must be between 1 and 1000, got %d", in.Items))), nil
	}
	batch := make([]flow.Step, in.Items)
	sum, done := 0, 0
	for i := range batch {
		id := fmt.Sprintf("item-%d", i)
		batch[i] = flow.Step{ID: id, Name: "processItem", Input: i}
		v, ok, err := flow.Output[int](ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			sum += v
			done++
		}
	}
	if done < in.Items {
		return ctx.ScheduleSteps(batch...), nil
	}
	return ctx.Complete(map[string]int{"items": in.Items, "sum": sum}), nil
}

// ProcessItem squares its input.
func ProcessItem(_ context.Context, i int) (int, error) { return i * i, nil }

// ReminderInput is the input of the reminder workflow.
type ReminderInput struct {
	// Who is reminded. Defaults to "you".
	Who string `json:"who"`
	// After is how long to wait, as a Go duration. Defaults to "5s".
	After string `json:"after"`
}

// Reminder sleeps on a durable timer, holding no worker, then sends a reminder.
func Reminder(ctx *flow.Context, in ReminderInput) (flow.Decision, error) {
	if in.Who == "" {
		in.Who = "you"
	}
	after, err := positiveDuration("after", in.After, "5s")
	if err != nil {
		return ctx.Fail(err), nil
	}
	if !ctx.Fired("wait") {
		return ctx.Sleep("wait", after), nil
	}
	sent, ok, err := flow.Output[string](ctx, "send")
	if err != nil || !ok {
		return ctx.ScheduleStep("send", "sendReminder", in.Who), err
	}
	return ctx.Complete(sent), nil
}

// SendReminder stands in for sending a message.
func SendReminder(ctx context.Context, who string) (string, error) {
	return fmt.Sprintf("reminded %s (key %s)", who, flow.IdempotencyKey(ctx, who)), nil
}
