package core

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// DeterministicSeed derives 32 bytes for the n-th draw from stream (e.g. "random", "uuid") of
// run runID, keyed by the run's random seed: HMAC-SHA256(seed, runID 0x00 stream 0x00 n). The
// same run, stream and n always give the same bytes, so values derived from them are identical
// on every replay; without the seed, which only the run's history holds, they cannot be guessed.
func DeterministicSeed(seed, runID, stream string, n uint64) [32]byte {
	m := hmac.New(sha256.New, []byte(seed))
	m.Write([]byte(runID))
	m.Write([]byte{0})
	m.Write([]byte(stream))
	m.Write([]byte{0})
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	m.Write(b[:])
	var out [32]byte
	copy(out[:], m.Sum(nil))
	return out
}
