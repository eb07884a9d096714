package flow

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

func TestRegistryQuery(t *testing.T) {
	t.Parallel()
	type progress struct {
		Done    int    `json:"done"`
		Stage   string `json:"stage"`
		Queried string `json:"queried,omitempty"`
	}
	decided := 0
	reg := NewRegistry(nil)
	RegisterWorkflow(reg, "order", func(ctx *Context, _ any) (Decision, error) {
		p := progress{Stage: "charging"}
		if ctx.StepOutput("charge") != nil {
			p = progress{Done: 1, Stage: "shipping"}
		}
		HandleQuery(ctx, "progress", func(who string) (progress, error) {
			p.Queried = who
			return p, nil
		})
		HandleQuery(ctx, "fails", func(struct{}) (int, error) { return 0, &Error{Kind: "no_stock", Message: "nothing to tell"} })
		HandleQuery(ctx, "panics", func(struct{}) (int, error) { panic("boom") })
		HandleQuery(ctx, "status", func(struct{}) (string, error) { return "from the code", nil })
		if !ctx.IsQuerying() {
			decided++
		}
		return ctx.ScheduleStep("charge", "charge", nil), nil
	})
	RegisterWorkflow(reg, "broken", func(ctx *Context, _ any) (Decision, error) { panic("broken code") })
	RegisterQuery(reg, "order", "status", func(ctx *Context, _ struct{}) (Status, error) { return ctx.Snapshot().Status, nil })
	RegisterQuery(reg, "order", "unencodable", func(ctx *Context, _ struct{}) (func(), error) { return func() {}, nil })

	running := project(t, "order-1", started("s"),
		&event.StepScheduled{Steps: []event.StepSpec{{ID: "charge", Name: "charge", Input: json.RawMessage(`null`), Retry: event.RetryPolicy{}.Normalize()}}})
	ended := project(t, "order-2", started("s"),
		&event.StepScheduled{Steps: []event.StepSpec{{ID: "charge", Name: "charge", Input: json.RawMessage(`null`), Retry: event.RetryPolicy{}.Normalize()}}},
		&event.StepCompleted{StepID: "charge", Attempt: 1, Output: json.RawMessage(`"ok"`)},
		&event.RunCompleted{Output: json.RawMessage(`"done"`)})
	broken := project(t, "broken-1", &event.RunStarted{Spec: event.Spec{Definition: "broken"}, Input: json.RawMessage(`{}`), Seed: "s"})
	unknownDef := project(t, "other-1", &event.RunStarted{Spec: event.Spec{Definition: "other"}, Input: json.RawMessage(`{}`), Seed: "s"})

	// failed checks a handler's failure: a *QueryError matching ErrQueryFailed, of kind, whose
	// message contains message.
	failed := func(kind, message string) func(t *testing.T, err error) {
		return func(t *testing.T, err error) {
			var f *QueryError
			require.True(t, errors.As(err, &f))
			require.ErrorIs(t, err, ErrQueryFailed)
			require.Equal(t, kind, f.Kind)
			require.Contains(t, f.Message, message)
		}
	}
	tests := []struct {
		name    string
		s       *core.Snapshot
		query   string
		args    string
		want    string
		wantErr func(t *testing.T, err error)
	}{
		{name: "HandleQueryDuringAStep", s: running, query: "progress", args: `"ops"`, want: `{"done":0,"stage":"charging","queried":"ops"}`},
		{name: "HandleQueryOfAnEndedRun", s: ended, query: "progress", want: `{"done":1,"stage":"shipping"}`},
		{name: "RegisterQueryReadsTheSnapshot", s: running, query: "status", want: `"running"`},
		{name: "RegisterQueryOfAnEndedRun", s: ended, query: "status", want: `"completed"`},
		{name: "UnknownQueryListsTheKnown", s: running, query: "eta", wantErr: func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrUnknownQuery)
			var u *QueryError
			require.True(t, errors.As(err, &u))
			require.Equal(t, []string{"fails", "panics", "progress", "status", "unencodable"}, u.Registered)
			require.ErrorContains(t, err, `workflow "order" (run "order-1") has no query "eta"; it handles fails, panics, progress, status, unencodable`)
		}},
		{name: "BadArgs", s: running, query: "progress", args: `{"who":1}`, wantErr: func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrInvalidInput)
			require.ErrorContains(t, err, `the arguments of query "progress" (run "order-1") do not decode into string`)
		}},
		{name: "HandlerError", s: running, query: "fails", wantErr: failed("no_stock", "")},
		{name: "HandlerPanic", s: running, query: "panics", wantErr: failed(KindPanic, "the handler panicked: boom")},
		{name: "WorkflowPanicWhileEvaluated", s: broken, query: "anything", wantErr: failed(KindPanic, "broken code")},
		{name: "UnencodableResult", s: running, query: "unencodable", wantErr: failed(KindInvalidOutput, "")},
		{name: "UnknownDefinition", s: unknownDef, query: "status", wantErr: func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrNotFound)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.s.Clone()
			out, err := reg.query(tt.s, tt.query, json.RawMessage(tt.args))
			if tt.wantErr != nil {
				require.Error(t, err)
				tt.wantErr(t, err)
			} else {
				require.NoError(t, err)
				require.JSONEq(t, tt.want, string(out))
			}
			require.Equal(t, before, tt.s, "a query never changes the snapshot")
		})
	}
	require.Zero(t, decided, "queries evaluate the code in query mode only")

	t.Run("HandleQueryIsInertWhileDeciding", func(t *testing.T) {
		d, err := reg.runWorkflow("order", nil, running)
		require.NoError(t, err)
		require.Equal(t, `ScheduleStep("charge")`, d.Describe())
		require.Equal(t, 1, decided)
	})

	t.Run("RegistrationPanics", func(t *testing.T) {
		require.PanicsWithValue(t, `flow: RegisterQuery: query "status" of workflow "order" is already registered`, func() {
			RegisterQuery(reg, "order", "status", func(*Context, struct{}) (int, error) { return 0, nil })
		})
		require.Panics(t, func() {
			RegisterQuery(reg, "order", "bad.name", func(*Context, struct{}) (int, error) { return 0, nil })
		})
		require.Panics(t, func() { RegisterQuery[struct{}, int](reg, "order", "nil", nil) })
		require.Equal(t, []string{"status", "unencodable"}, reg.queryNames("order"))
	})
}
