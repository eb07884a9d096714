package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// Ack is what the executor learnt from one operation's answer: an acknowledgement (Acked)
// names the run that took the input; anything else records the error.
type Ack struct {
	Op    int
	Kind  Kind
	Asked string // the run (or schedule) the operation addressed
	// Run is the run that took the input, as the answer named it.
	Run string
	// ID is the input's delivery ID, update ID or request ID.
	ID    string
	Acked bool
	Err   string
	// Update is an update's answer.
	Update *UpdateAnswer
	// NewRun is the new run of a reset, or the run of a trigger.
	NewRun string
	// Overlap is the policy a trigger or backfill asked for ("" for the schedule's).
	Overlap string
	At      time.Time
}

// UpdateAnswer is the outcome an update's caller was given.
type UpdateAnswer struct {
	// Status is completed, rejected, failed or aborted; "" when the caller got no outcome (a
	// timeout, a blocked run).
	Status string
	Result json.RawMessage
	Detail string
}

// ScheduleEpoch is one life of a schedule: created with a policy, maybe deleted later.
type ScheduleEpoch struct {
	Name, Def, Overlap string
	Created, Deleted   time.Time
}

// Ledger records the answers of a sequence's operations. It is safe for concurrent use.
type Ledger struct {
	mu        sync.Mutex
	acks      []Ack
	schedules []ScheduleEpoch
	defPaused map[string]bool
}

func (l *Ledger) add(a Ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acks = append(l.acks, a)
}

// Acks returns the answers so far.
func (l *Ledger) Acks() []Ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Ack(nil), l.acks...)
}

// Schedules returns the schedules' lives.
func (l *Ledger) Schedules() []ScheduleEpoch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ScheduleEpoch(nil), l.schedules...)
}

// DefPaused reports whether definition def is paused, as the last acknowledged pause or
// unpause of it says.
func (l *Ledger) DefPaused(def string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.defPaused[def]
}

// Executor applies operations to a stack and records their answers.
type Executor struct {
	stack  Stack
	client *flow.Client
	ledger *Ledger
	// opTimeout bounds an operation's request.
	opTimeout time.Duration
	// async counts the updates waiting for their outcome in the background, until asyncCtx
	// ends (StopWaiting).
	async       sync.WaitGroup
	asyncCtx    context.Context
	stopWaiting context.CancelFunc
	faults      int
}

// NewExecutor returns an executor of operations on stack. The updates it sends wait for their
// outcome until ctx ends or StopWaiting is called.
func NewExecutor(ctx context.Context, stack Stack, opTimeout time.Duration) *Executor {
	x := &Executor{stack: stack, client: stack.Client(), ledger: &Ledger{defPaused: map[string]bool{}}, opTimeout: opTimeout}
	x.asyncCtx, x.stopWaiting = context.WithCancel(ctx)
	return x
}

// Ledger returns the executor's record of answers.
func (x *Executor) Ledger() *Ledger { return x.ledger }

// StopWaiting ends the waits of the updates still waiting for their outcome (they are recorded
// unanswered) and returns once every one is recorded.
func (x *Executor) StopWaiting() {
	x.stopWaiting()
	x.async.Wait()
}

// Apply applies operation i. It returns an error only when the stack is broken (a killed
// service did not come back); the answers of the operation, errors included, go to the ledger.
func (x *Executor) Apply(ctx context.Context, i int, op Op) error {
	octx, cancel := context.WithTimeout(ctx, x.opTimeout)
	defer cancel()
	a := Ack{Op: i, Kind: op.Kind(), At: time.Now()}
	var err error
	c := x.client
	switch o := op.(type) {
	case Start:
		a.Asked = o.Run
		opts := &flow.StartOptions{RunID: o.Run, OnConflict: flow.ConflictPolicy(o.OnConflict), Reuse: flow.ReusePolicy(o.Reuse),
			Delay: time.Duration(o.DelayMs) * time.Millisecond, Priority: o.Priority}
		if o.Dedup != "" {
			opts.DedupKey, opts.DedupWindow = o.Dedup, time.Minute
		}
		if o.Debounce != "" {
			opts.Debounce = &flow.Debounce{Key: o.Debounce, Period: 300 * time.Millisecond}
		}
		a.Run, err = c.Start(octx, o.Def, o.In, opts)
	case Signal:
		a.Asked, a.ID = o.Run, o.Delivery
		a.Run, err = c.Signal(octx, o.Run, o.Name, o.Delivery, &flow.DeliveryOptions{DeliveryID: o.Delivery})
	case SignalWithStart:
		a.Asked, a.ID = o.Run, o.Delivery
		a.Run, _, err = c.SignalWithStart(octx, o.Def, o.In, SignalGo, o.Delivery, &flow.WithStartOptions{RunID: o.Run, UpdateID: o.Delivery})
	case Update:
		a.Asked, a.ID = o.Run, o.ID
		x.update(a, func(ctx context.Context) (*flow.UpdateOutcome, error) {
			return c.Update(ctx, o.Run, o.Name, o.Amount, &flow.UpdateOptions{UpdateID: o.ID, Wait: true})
		})
		return nil
	case UpdateWithStart:
		a.Asked, a.ID = o.Run, o.ID
		x.update(a, func(ctx context.Context) (*flow.UpdateOutcome, error) {
			return c.UpdateWithStart(ctx, o.Def, o.In, UpdateAdd, o.Amount, &flow.WithStartOptions{RunID: o.Run, UpdateID: o.ID, Wait: true})
		})
		return nil
	case Query:
		a.Asked = o.Run
		var sum int
		err = c.Query(octx, o.Run, QuerySum, nil, &sum)
	case Cancel:
		a.Asked = o.Run
		a.Run, err = c.Cancel(octx, o.Run, "torture")
	case Terminate:
		a.Asked = o.Run
		a.Run, err = c.Terminate(octx, o.Run, "torture")
	case PauseRun:
		a.Asked, a.ID = o.Run, fmt.Sprintf("p%d", i)
		opts := &flow.PauseOptions{Reason: "torture", RequestID: a.ID}
		if o.Unpause {
			a.Run, err = c.Pauses().UnpauseRun(octx, o.Run, opts)
		} else {
			a.Run, err = c.Pauses().PauseRun(octx, o.Run, opts)
		}
	case PauseDef:
		a.Asked = o.Def
		if o.Unpause {
			_, err = c.Pauses().UnpauseDefinition(octx, o.Def, nil)
		} else {
			_, err = c.Pauses().PauseDefinition(octx, o.Def, &flow.PauseOptions{Reason: "torture"})
		}
		if err == nil {
			x.ledger.mu.Lock()
			x.ledger.defPaused[o.Def] = !o.Unpause
			x.ledger.mu.Unlock()
		}
	case Reset:
		a.Asked, a.ID = o.Run, o.Request
		var res *flow.ResetResult
		switch o.Mode {
		case ResetRerun:
			res, err = c.Rerun(octx, o.Run, "s0", &flow.RerunOptions{DropInputs: o.Drop, Reason: "torture", RequestID: o.Request})
		default:
			opts := flow.ResetOptions{DropInputs: o.Drop, Reason: "torture", RequestID: o.Request}
			switch o.Mode {
			case ResetFirst:
				opts.Seq = 1
			case ResetStep:
				opts.StepID = "s0"
			default:
				opts.LastDecision = true
			}
			res, err = c.Reset(octx, o.Run, &opts)
		}
		if res != nil {
			a.Run, a.NewRun = res.RunID, res.NewRunID
		}
	case Batch:
		a.Asked, a.ID = o.From, o.ID
		spec := flow.BatchSpec{Op: flow.BatchOp(o.Op), Where: fmt.Sprintf("run_id >= %q", o.From), Definition: o.Def, Reason: "torture", Rate: 200}
		switch o.Op {
		case "signal":
			spec.Signal, spec.Payload = SignalGo, json.RawMessage(`"batch"`)
		case "reset":
			spec.Reset = &flow.BatchReset{Mode: string(event.ResetToLastDecision)}
		}
		_, err = c.Batches().Start(octx, spec, &flow.BatchOptions{ID: o.ID})
	case Schedule:
		a.Asked = o.Name
		_, err = c.Schedules().Create(octx, o.Name, flow.ScheduleConfig{Every: time.Duration(o.EveryMs) * time.Millisecond,
			Definition: o.Def, Input: o.In, Overlap: flow.Overlap(o.Overlap)})
		if err == nil {
			x.ledger.mu.Lock()
			x.ledger.schedules = append(x.ledger.schedules, ScheduleEpoch{Name: o.Name, Def: o.Def, Overlap: o.Overlap, Created: a.At})
			x.ledger.mu.Unlock()
		}
	case Trigger:
		a.Asked, a.ID, a.Overlap = o.Name, o.Request, o.Overlap
		if o.Twice {
			b := a
			b.ID = o.Request + "-2"
			var wg sync.WaitGroup
			var berr error
			var bd *flow.ScheduleDescription
			wg.Go(func() {
				bd, berr = c.Schedules().Trigger(octx, o.Name, &flow.TriggerOptions{Overlap: flow.Overlap(o.Overlap), RequestID: b.ID})
			})
			d, err := c.Schedules().Trigger(octx, o.Name, &flow.TriggerOptions{Overlap: flow.Overlap(o.Overlap), RequestID: a.ID})
			wg.Wait()
			x.trigger(b, bd, berr)
			x.trigger(a, d, err)
			return nil
		}
		d, err := c.Schedules().Trigger(octx, o.Name, &flow.TriggerOptions{Overlap: flow.Overlap(o.Overlap), RequestID: o.Request})
		x.trigger(a, d, err)
		return nil
	case Backfill:
		a.Asked, a.ID, a.Overlap = o.Name, o.Request, o.Overlap
		end := time.Now().Add(-time.Millisecond)
		_, err = c.Schedules().Backfill(octx, o.Name, end.Add(-time.Duration(o.SpanMs)*time.Millisecond), end,
			&flow.TriggerOptions{Overlap: flow.Overlap(o.Overlap), RequestID: o.Request})
	case SchedulePause:
		a.Asked = o.Name
		if o.Unpause {
			err = c.Schedules().Unpause(octx, o.Name, "torture")
		} else {
			err = c.Schedules().Pause(octx, o.Name, "torture")
		}
	case ScheduleDelete:
		a.Asked = o.Name
		err = x.deleteSchedule(octx, o.Name)
	case Fault:
		a.Asked = string(o.Point)
		x.faults++
		x.stack.Arm(o.Point, o.Every, o.Times)
	case Kill:
		a.Asked = o.Role
		if err := x.stack.Kill(ctx, o.Role); err != nil {
			return fmt.Errorf("torture: %s did not start again after its kill: %w", o.Role, err)
		}
	case Wait:
		select {
		case <-time.After(time.Duration(o.Ms) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	default:
		return fmt.Errorf("torture: unknown operation %T", op)
	}
	a.Acked = err == nil
	if err != nil {
		a.Err = err.Error()
	}
	x.ledger.add(a)
	return nil
}

func (x *Executor) trigger(a Ack, d *flow.ScheduleDescription, err error) {
	switch {
	case err != nil:
		a.Err = err.Error()
	case d != nil:
		a.Acked = d.Accepted
		a.NewRun = d.TriggerRunID
		if !d.Accepted {
			a.Err = "not accepted (a repeated request)"
		}
	}
	x.ledger.add(a)
}

func (x *Executor) deleteSchedule(ctx context.Context, name string) error {
	err := x.client.Schedules().Delete(ctx, name)
	if err == nil {
		x.ledger.mu.Lock()
		for i := range x.ledger.schedules {
			if s := &x.ledger.schedules[i]; s.Name == name && s.Deleted.IsZero() {
				s.Deleted = time.Now()
			}
		}
		x.ledger.mu.Unlock()
	}
	return err
}

// update runs an update in the background: its caller waits for the outcome while the
// sequence goes on.
func (x *Executor) update(a Ack, call func(context.Context) (*flow.UpdateOutcome, error)) {
	x.async.Go(func() {
		out, err := call(x.asyncCtx)
		ans := &UpdateAnswer{}
		var uerr *flow.UpdateError
		switch {
		case err == nil && out != nil:
			a.Run, ans.Status, ans.Result = out.RunID, string(out.Status), out.Result
		case errors.As(err, &uerr):
			a.Run, ans.Detail = uerr.RunID, uerr.Error()
			switch {
			case errors.Is(err, flow.ErrUpdateRejected):
				ans.Status = "rejected"
			case errors.Is(err, flow.ErrUpdateAborted):
				ans.Status = "aborted"
			default:
				ans.Status = "failed"
			}
		}
		if err != nil {
			a.Err = err.Error()
		}
		a.Acked = ans.Status != ""
		a.Update = ans
		x.ledger.add(a)
	})
}

// scheduleLife is how long the schedules live after the last operation on them: long enough
// for a slot or two to come.
const scheduleLife = 3 * time.Second

// Finale ends a sequence's inputs: it lets the schedules act for a while, deletes them (so that
// no new runs start while the sequence settles) and disarms the faults.
func (x *Executor) Finale(ctx context.Context) {
	x.stack.DisarmAll()
	var last time.Time
	for _, a := range x.ledger.Acks() {
		switch a.Kind {
		case KindSchedule, KindTrigger, KindBackfill, KindSchedulePause:
			if a.At.After(last) {
				last = a.At
			}
		}
	}
	if live := slices.ContainsFunc(x.ledger.Schedules(), func(s ScheduleEpoch) bool { return s.Deleted.IsZero() }); live {
		select {
		case <-time.After(time.Until(last.Add(scheduleLife))):
		case <-ctx.Done():
		}
	}
	for _, s := range x.ledger.Schedules() {
		if !s.Deleted.IsZero() {
			continue
		}
		deadline := time.Now().Add(x.opTimeout)
		for {
			octx, cancel := context.WithTimeout(ctx, x.opTimeout)
			err := x.deleteSchedule(octx, s.Name)
			cancel()
			if err == nil || errors.Is(err, flow.ErrScheduleNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
	}
}
