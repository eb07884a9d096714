package flow

import (
	"encoding/json"
	"fmt"
)

// Input decodes the run's input into T.
func Input[T any](ctx *Context) (T, error) {
	var v T
	err := ctx.Input(&v)
	return v, err
}

// Output returns the output of step id decoded into T. ok reports whether the step has
// settled. err is the step's *StepFailure when it failed or was cancelled, or the decoding error.
func Output[T any](ctx *Context, id string) (v T, ok bool, err error) {
	if err := ctx.StepError(id); err != nil {
		return v, true, err
	}
	raw := ctx.StepOutput(id)
	if raw == nil {
		return v, false, nil
	}
	return decodeAs[T](raw, "output of step", id)
}

// SignalValue returns the payload of the signal bound to wait waitID decoded into T. ok reports
// whether a signal has arrived.
func SignalValue[T any](ctx *Context, waitID string) (v T, ok bool, err error) {
	raw := ctx.Signal(waitID)
	if raw == nil {
		return v, false, nil
	}
	return decodeAs[T](raw, "signal of wait", waitID)
}

// HookValue returns the payload delivered to hook id decoded into T. ok reports whether the
// delivery has arrived.
func HookValue[T any](ctx *Context, id string) (v T, ok bool, err error) {
	raw := ctx.Hook(id)
	if raw == nil {
		return v, false, nil
	}
	return decodeAs[T](raw, "delivery to hook", id)
}

// ChildOutput returns the output of child id decoded into T. ok reports whether the child has
// ended; err is its *ChildFailure when it failed or was cancelled, or the decoding error.
func ChildOutput[T any](ctx *Context, id string) (v T, ok bool, err error) {
	r := ctx.Child(id)
	if r == nil {
		return v, false, nil
	}
	if r.Err != nil {
		return v, true, r.Err
	}
	return decodeAs[T](r.Output, "output of child", id)
}

func decodeAs[T any](raw json.RawMessage, what, id string) (T, bool, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, true, fmt.Errorf("decoding the %s %q into %T: %w", what, id, v, err)
	}
	return v, true, nil
}
