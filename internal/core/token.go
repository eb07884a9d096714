package core

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// HookToken derives the token of hook hookID of run runID from the run's random seed: 160 bits
// of HMAC-SHA256, as 32 lowercase base32 characters. Without the seed, which only the run's
// history holds, the token cannot be guessed; with it, a replay derives the same token.
func HookToken(seed, runID, hookID string) string {
	m := hmac.New(sha256.New, []byte(seed))
	m.Write([]byte(runID))
	m.Write([]byte{0})
	m.Write([]byte(hookID))
	return strings.ToLower(tokenEncoding.EncodeToString(m.Sum(nil)[:20]))
}
