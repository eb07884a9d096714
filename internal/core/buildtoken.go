package core

import (
	"crypto/sha256"
	"encoding/hex"
)

// BuildToken returns build ID id as a subject token and consumer name part: id itself when it
// holds only letters, digits, '-' and '_', else "~" and the first 16 hex digits of its SHA-256
// (a build ID such as "v1.2.3" cannot be a token).
func BuildToken(id string) string {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			sum := sha256.Sum256([]byte(id))
			return "~" + hex.EncodeToString(sum[:8])
		}
	}
	return id
}
