package core

// PendingInputs returns what the run received and its workflow has not taken yet: signals that
// no signal wait consumed (buffered) and updates not yet accepted or rejected, with the bytes of
// their payloads as the snapshot holds them (a reference, for an offloaded payload). It is a
// projection of the history, as the rest of the snapshot: it costs one pass over the pending
// inputs.
func (s *Snapshot) PendingInputs() (n int, bytes int64) {
	for _, q := range s.buffered {
		for _, i := range q {
			n++
			bytes += int64(len(s.Signals[i].Payload))
		}
	}
	for _, u := range s.Updates {
		if u.Status == UpdateReceived {
			n++
			bytes += int64(len(u.Payload))
		}
	}
	return n, bytes
}

// SignalAwaited reports whether a signal wait is waiting for a signal called name: the next one
// received is bound to it at once, and is not pending.
func (s *Snapshot) SignalAwaited(name string) bool { return len(s.awaiting[name]) > 0 }
