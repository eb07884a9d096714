package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/parked"
	"github.com/flowrun/flow/pkg/event"
)

// The service is the one writer of FLOW_HOOKS and FLOW_PARKED (internal/api/derived.go): the
// workers ask it to claim a hook's token before they commit the hook.created, and to park a run
// they cannot drive. Any replica answers; both writes are idempotent and guarded by the bucket
// (a create-only claim, a takeover at the route's revision), so replicas answering at once agree.

// maxConcurrentDoors bounds the claims and parks answered at once. They have slots of their own:
// a worker's decision waits on a claim, and must not queue behind slow listings.
const maxConcurrentDoors = 64

// serveDoors adds the claim and park endpoints to the service's micro service.
func (s *Service) serveDoors(svc micro.Service) error {
	slots := make(chan struct{}, maxConcurrentDoors)
	for subject, fn := range map[string]func(context.Context, []byte) (any, error){
		api.SubjectHookClaim: handle(s.claimHook),
		api.SubjectPark:      handle(s.parkRun),
	} {
		name := strings.ReplaceAll(strings.TrimPrefix(subject, api.DerivedPrefix), ".", "_")
		if err := s.addEndpoint(svc, name, subject, slots, queryTimeout, "", fn); err != nil {
			return err
		}
	}
	return nil
}

// claimHook routes req.Token to hook req.HookID of run req.RunID (engine.ClaimHook: create-only,
// taking the token over from a run that ended), or answers which live run's hook holds it.
func (s *Service) claimHook(ctx context.Context, req api.HookClaim) (*api.HookClaimResponse, error) {
	if req.Token == "" || req.HookID == "" {
		return nil, &api.Error{Code: api.CodeInvalid, Message: "a hook claim needs the token and the hook ID"}
	}
	if err := event.ValidateDerivedRunID(req.RunID); err != nil {
		return nil, &api.Error{Code: api.CodeInvalid, Message: "a hook claim's run: " + err.Error()}
	}
	err := s.engine.ClaimHook(ctx, req.Token, req.RunID, req.HookID)
	var taken *engine.TokenTakenError
	switch {
	case errors.As(err, &taken):
		return &api.HookClaimResponse{TakenBy: &api.HookRef{RunID: taken.RunID, HookID: taken.HookID}}, nil
	case errors.Is(err, jetstream.ErrInvalidKey):
		return nil, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("hook %q of run %q: token %q is not a valid key: %v", req.HookID, req.RunID, req.Token, err)}
	case err != nil:
		return nil, fmt.Errorf("claiming token %q for hook %q of run %q: %w", req.Token, req.HookID, req.RunID, err)
	}
	return &api.HookClaimResponse{}, nil
}

// parkRun writes run p.RunID's FLOW_PARKED entry, p, unless the runs index says the run ended
// (or was deleted): such an entry would only wait for the reconciler.
func (s *Service) parkRun(ctx context.Context, p parked.Run) (*api.ParkResponse, error) {
	if err := event.ValidateDerivedRunID(p.RunID); err != nil {
		return nil, &api.Error{Code: api.CodeInvalid, Message: "a park request's run: " + err.Error()}
	}
	if sum, ok := s.index.get(p.RunID); ok && (sum.Status.Terminal() || sum.Deleted != nil) {
		return &api.ParkResponse{}, nil
	}
	if err := s.parked.Put(ctx, p); err != nil {
		return nil, fmt.Errorf("parking run %q: %w", p.RunID, err)
	}
	s.logger.DebugContext(ctx, "run parked", slog.String("run_id", p.RunID), slog.String("by", p.By), slog.String("reason", p.Reason))
	return &api.ParkResponse{Parked: true}, nil
}
