package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
)

// The doors (internal/api/owner.go): the schedule runner and the batch executor are the one
// writers of FLOW_SCHEDULES and FLOW_BATCHES, and each serves the changes the ingress forwards
// as a micro service while its replica leads (schedule_door.go, batch_door.go). A replica that
// does not lead does not subscribe: a request then gets no responders at once, and the ingress
// answers its caller that the scheduler is not running.

// doorTimeout bounds one operation of a door; the ingress waits a little longer for its answer
// (ownerTimeout, 9 s).
const doorTimeout = 8 * time.Second

// doorOp carries out one operation on its request's body, and returns the answer or the error
// the ingress gives its caller.
type doorOp func(ctx context.Context, data []byte) (any, *api.IngressError)

// openDoor serves ops as micro service name, each on subject group.<op>. Once the server has the
// subscriptions it sets open; close clears open and stops the service. Each endpoint answers
// its requests one at a time, in order, each within doorTimeout whatever becomes of the lease
// meanwhile (every write is a compare-and-set: an answer from a replica that just lost its lease
// is harmless).
func openDoor(nc *nats.Conn, logger *slog.Logger, name, description, group string, ops map[string]doorOp, open *atomic.Bool) (close func(), err error) {
	svc, err := micro.AddService(nc, micro.Config{Name: name, Version: "1.0.0", Description: description})
	if err != nil {
		return nil, fmt.Errorf("starting the %s service: %w", name, err)
	}
	g := svc.AddGroup(group)
	for op, fn := range ops {
		err := g.AddEndpoint(op, micro.HandlerFunc(func(r micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), doorTimeout)
			defer cancel()
			resp, e := fn(ctx, r.Data())
			var err error
			if e != nil {
				err = r.Error(string(e.Code), e.Message, nil)
			} else {
				err = r.RespondJSON(resp)
			}
			if err != nil {
				logger.Warn("answering the ingress failed", slog.String("subject", r.Subject()), slog.String("error", err.Error()))
			}
		}))
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("adding the %s.%s endpoint: %w", group, op, err)
		}
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("subscribing the %s endpoints: %w", group, err)
	}
	open.Store(true)
	return func() {
		open.Store(false)
		_ = svc.Stop()
	}, nil
}
