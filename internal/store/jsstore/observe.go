package jsstore

import "github.com/nats-io/nats.go/jetstream"

// Observe records stream message m, a commit of run runID read without this store (a direct get
// of the run's last message, say), as if the store had read it: an Append right after that
// commit then publishes at once, without reading the run's last commit from the stream's leader
// first. Observing a message from a replica that lags is safe: the append's expected stream
// sequence makes it conflict if the run moved on since.
func (s *Store) Observe(runID string, m *jetstream.RawStreamMsg) error {
	seq, err := lastSeq(m)
	if err != nil {
		return err
	}
	s.remember(runID, seq, m.Sequence)
	return nil
}
