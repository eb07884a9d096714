package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/engine"
)

// CheckpointDue: commits that take a run across a multiple of the interval are due a
// checkpoint, however many events they hold; the interval is every events, and an eighth of a
// long history (rounded down to a power of two) once that is more.
func TestCheckpointDue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		prev, seq, every uint64
		due              bool
	}{
		{0, 9, 10, false},
		{9, 10, 10, true},
		{10, 19, 10, false},
		{19, 25, 10, true},
		{0, 35, 10, true},
		{0, 999, 0, false},
		{999, 1000, 0, true},                // 0: DefaultCheckpointEvery
		{131_071, 131_072, 1000, true},      // every 16,384 at this length
		{1_048_576, 1_100_000, 1000, false}, // every 131,072 at 1M events, not 1,000
		{1_100_000, 1_179_648, 1000, true},
	} {
		require.Equal(t, tt.due, engine.CheckpointDue(tt.prev, tt.seq, tt.every), "%d -> %d every %d", tt.prev, tt.seq, tt.every)
	}
}
