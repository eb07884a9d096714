package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
)

// The ingress writes neither FLOW_SCHEDULES nor FLOW_BATCHES: it checks its callers' changes of
// schedules and batch jobs, forwards each to the bucket's one writer, the scheduler replica that
// leads the schedule runner or the batch executor (internal/api/owner.go), and answers with the
// writer's answer. It reads both buckets itself for descriptions and listings.

// ownerTimeout bounds the wait for the writer's answer: longer than the writer takes at most
// (the scheduler's doorTimeout, 8 s), shorter than an attempt of the Go client (10 s), which
// then gets this answer rather than retrying on its own.
const ownerTimeout = 9 * time.Second

// askScheduler sends req to the scheduler's door on subject and decodes its answer into resp.
// what names the writer in the error when none answers ("schedule runner", "batch executor"):
// that error, and a writer that did not answer in time, are CodeIngressBusy (retryable).
func (s *Service) askScheduler(ctx context.Context, subject, what string, req, resp any) *api.IngressError {
	data, err := json.Marshal(req)
	if err != nil {
		return &api.IngressError{Code: api.CodeIngressInternal, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, ownerTimeout)
	defer cancel()
	m, err := s.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data})
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("the scheduler is not running: no scheduler replica leads the %s, "+
			"which alone makes this change; start `flowd scheduler` (or `flow dev`), or wait for a standby to take the lease over, and retry", what)}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("the scheduler's %s did not answer within %s: "+
			"the change may or may not be made; read it back, and retry", what, ownerTimeout)}
	case err != nil:
		return &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("asking the scheduler's %s: %v; retry", what, err)}
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &api.IngressError{Code: api.IngressCode(code), Message: m.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(m.Data, resp); err != nil {
		return &api.IngressError{Code: api.CodeIngressInternal, Message: fmt.Sprintf("the scheduler's %s answered something unreadable: %v", what, err)}
	}
	return nil
}
