package scheduler

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// admissionLease is the admission controller's key in FLOW_LEASES. It is a lease of its own, not
// the timers' one, so that the two may lead in different replicas.
const admissionLease = "admission"

// runAdmission competes for the admission lease and admits runs while it holds it, until ctx
// ends. A leader that overlaps a new one for a moment cannot admit past the limits, since every
// admission is a compare-and-set of the group's state.
func (s *Scheduler) runAdmission(ctx context.Context) {
	defer close(s.admitDone)
	s.runLeased(ctx, leased{key: admissionLease, role: "admission controller", doing: "admitting runs",
		leading: &s.admitting, serve: s.serveAdmission})
}

// acquireLease takes lease key if it is free, or if it is held under this replica's name.
func (s *Scheduler) acquireLease(ctx context.Context, key string) (uint64, error) {
	rev, err := s.leases.Create(ctx, key, []byte(s.cfg.Name))
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return rev, err
	}
	held, gerr := s.leases.Get(ctx, key)
	if gerr != nil || string(held.Value()) != s.cfg.Name {
		return 0, err
	}
	return s.leases.Update(ctx, key, []byte(s.cfg.Name), held.Revision())
}
