package core

import "time"

// KeyEntry is one entry of the start key index of dedup and debounce starts (internal/engine
// keeps the index; the history service is its one writer).
type KeyEntry struct {
	// RunID is the run started under the key.
	RunID string `json:"run_id"`
	// Key is the caller's key, as given (the index key is a digest of it).
	Key string `json:"key"`
	// Until is when a dedup entry's window ends; zero for a debounce entry, which lasts until
	// its run's delay fires.
	Until time.Time `json:"until,omitzero"`
}
