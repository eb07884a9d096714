package jsstore

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/inputsig"
	"github.com/flowrun/flow/pkg/event"
)

// Input signatures (internal/inputsig). A store with the input signing key (Options.Unsigned
// unset: the history service's, the ingress's, the scheduler's) sets the Flow-Input-Signature
// header on each commit it appends that holds input events, and reads a commit after the key's
// epoch whose input events are not signed as a message that is not the run's history: the
// history does not read back (store.ErrDamaged), the history service quarantines the run, and
// `flow resume --accept-damage` voids the forged commit. A store without the key (a worker's)
// neither signs nor checks: the history service, which follows every commit, does.

// HeaderInputSignature is the history message header of a commit's input signature.
const HeaderInputSignature = inputsig.Header

// hasInput reports whether envs hold an input event.
func hasInput(envs []event.Envelope) bool {
	for _, e := range envs {
		if inputsig.IsInput(e.Payload) {
			return true
		}
	}
	return false
}

// sign sets h's input signature for the commit of envs encoded as body, if the store signs and
// the commit holds input events.
func (s *Store) sign(h nats.Header, runID string, envs []event.Envelope, body []byte) {
	if s.inputs == nil || !hasInput(envs) {
		return
	}
	raws, err := event.DecodeRawEnvelopes(body)
	if err != nil || len(raws) != len(envs) {
		return // not this package's encoding: the commit reads back as unsigned, never as valid
	}
	payloads := make([]json.RawMessage, len(raws))
	for i, r := range raws {
		payloads[i] = r.Data
	}
	h.Set(HeaderInputSignature, s.inputs.Sign(runID, envs, payloads))
}

// VerifyInputs checks the input signature of a commit of run runID (events envs, their payloads'
// JSON as stored, message headers h) stored at stream sequence pos (0 if unknown): nil if the
// store has no key, if the message precedes the key's epoch, or if its input events are signed;
// otherwise an error wrapping event.ErrMalformed and inputsig.ErrUnsigned.
func (s *Store) VerifyInputs(runID string, pos uint64, h nats.Header, envs []event.Envelope, payloads []json.RawMessage) error {
	k := s.inputs
	if k == nil || (pos != 0 && pos <= k.EpochOf(s.layout.Partition(runID))) || !hasInput(envs) {
		return nil
	}
	if err := k.Verify(runID, envs, payloads, h.Get(HeaderInputSignature)); err != nil {
		return fmt.Errorf("stream message %d: %w", pos, err)
	}
	return nil
}

// SignsInputs reports whether the store holds the input signing key: it signs the inputs it
// appends and checks those it reads.
func (s *Store) SignsInputs() bool { return s.inputs != nil }

// verifyRead is VerifyInputs for a message the reader decoded into envs.
func (s *Store) verifyRead(runID string, pos uint64, h nats.Header, envs []event.Envelope, data []byte) error {
	if s.inputs == nil || pos <= s.inputs.EpochOf(s.layout.Partition(runID)) || !hasInput(envs) {
		return nil
	}
	raws, err := event.DecodeRawEnvelopes(data)
	if err != nil {
		return err
	}
	payloads := make([]json.RawMessage, len(raws))
	for i, r := range raws {
		payloads[i] = r.Data
	}
	return s.VerifyInputs(runID, pos, h, envs, payloads)
}
