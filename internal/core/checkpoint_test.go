package core_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// TestPropertyCheckpoint: a snapshot decoded from the checkpoint of a prefix of a history equals
// the projection of that prefix in every field, unexported ones included, and, fed the rest of
// the history, equals the projection of the whole: a cold load from a checkpoint and its tail is
// a replay from the start.
func TestPropertyCheckpoint(t *testing.T) {
	t.Parallel()
	eachCut(t, 23, func(seed uint64, hist []event.Envelope, cut int, prefix *core.Snapshot) {
		b, err := prefix.MarshalCheckpoint()
		require.NoError(t, err)
		decoded, err := core.UnmarshalCheckpoint(b)
		require.NoError(t, err, "seed %d", seed)
		require.True(t, reflect.DeepEqual(prefix, decoded), "seed %d: the decoded checkpoint differs from the snapshot at seq %d", seed, cut)
		requireUnshared(t, reflect.ValueOf(prefix), reflect.ValueOf(decoded), "Snapshot")

		whole, err := core.Project(hist[0].RunID, hist)
		require.NoError(t, err)
		require.NoError(t, decoded.ApplyAll(hist[cut:]), "seed %d", seed)
		require.True(t, reflect.DeepEqual(whole, decoded), "seed %d: checkpoint at %d plus the tail differs from the replay from the start", seed, cut)
		require.Equal(t, whole.Unsettled(), decoded.Unsettled())

		// Encoding the same snapshot twice decodes to the same snapshot (map order aside).
		again, err := whole.MarshalCheckpoint()
		require.NoError(t, err)
		d2, err := core.UnmarshalCheckpoint(again)
		require.NoError(t, err)
		require.True(t, reflect.DeepEqual(whole, d2), "seed %d: the checkpoint of the whole history differs", seed)
	})
}

// TestCheckpointRefusesDamage: truncated, altered or foreign bytes are an error, never a
// snapshot that differs.
func TestCheckpointRefusesDamage(t *testing.T) {
	t.Parallel()
	hist := generate(t, 7, 60)
	s, err := core.Project(hist[0].RunID, hist)
	require.NoError(t, err)
	b, err := s.MarshalCheckpoint()
	require.NoError(t, err)

	_, err = core.UnmarshalCheckpoint(nil)
	require.ErrorIs(t, err, core.ErrCheckpointCorrupt)
	_, err = core.UnmarshalCheckpoint([]byte("{\"run_id\":\"x\"}"))
	require.ErrorIs(t, err, core.ErrCheckpointCorrupt)

	layout := append([]byte(nil), b...)
	layout[9] ^= 0xff // the layout fingerprint
	_, err = core.UnmarshalCheckpoint(layout)
	require.ErrorIs(t, err, core.ErrCheckpointLayout)

	for _, n := range []int{20, len(b) / 2, len(b) - 1} {
		_, err = core.UnmarshalCheckpoint(b[:n])
		require.Error(t, err, "truncated to %d of %d bytes", n, len(b))
		require.True(t, errors.Is(err, core.ErrCheckpointCorrupt), "%v", err)
	}
	_, err = core.UnmarshalCheckpoint(append(append([]byte(nil), b...), 0))
	require.ErrorIs(t, err, core.ErrCheckpointCorrupt)
}

// BenchmarkCheckpoint measures encoding and decoding the checkpoint of a run of n events (steps
// scheduled and completed in turn), against projecting the same history (BenchmarkProject): a
// cold load from a checkpoint decodes instead of projecting, and reads only the tail.
// Run: go test -run - -bench BenchmarkCheckpoint ./internal/core
func BenchmarkCheckpoint(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		hist := longHistory(n)
		s, err := core.Project("bench", hist)
		if err != nil {
			b.Fatal(err)
		}
		enc, err := s.MarshalCheckpoint()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("encode/history=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for range b.N {
				if _, err := s.MarshalCheckpoint(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("decode/history=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for range b.N {
				if _, err := core.UnmarshalCheckpoint(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
