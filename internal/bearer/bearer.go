// Package bearer holds sets of bearer tokens: those configured, and those of a file read again
// when it changes. The ingress and the history service check their HTTP callers with it.
package bearer

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// FileCheckEvery is how often a Set looks at its file's modification time and size, at most.
const FileCheckEvery = 2 * time.Second

// Set is a set of bearer tokens: static ones, and those of a file ('#' starts a comment, one
// token a line) read again when its modification time or size changes. The zero Set (and nil)
// holds no token. Safe for concurrent use.
type Set struct {
	static []string
	file   string

	mu        sync.Mutex
	fromFile  []string
	modTime   time.Time
	size      int64
	checkedAt time.Time
}

// New returns the set of tokens and those of file (none when ""). It fails when file does not
// read; a file holding no token is an error unless tokens holds one, since it most likely means
// a misconfigured secret.
func New(tokens []string, file string) (*Set, error) {
	s := &Set{file: file}
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			s.static = append(s.static, t)
		}
	}
	if file != "" {
		if err := s.reload(time.Now()); err != nil {
			return nil, err
		}
		if len(s.fromFile) == 0 && len(s.static) == 0 {
			return nil, fmt.Errorf("tokens file %s holds no token; write one token per line", file)
		}
	}
	return s, nil
}

// Enabled reports whether the set was configured (with tokens or a file).
func (s *Set) Enabled() bool { return s != nil && (len(s.static) > 0 || s.file != "") }

// Match returns the token of the set equal to token (compared in constant time per token), and
// whether there is one.
func (s *Set) Match(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	found, ok := "", false
	for _, t := range s.Tokens() {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			found, ok = t, true
		}
	}
	return found, ok
}

// Tokens returns the tokens, reading the file again if it changed (a file being replaced
// keeps the tokens read before). The caller must not modify the slice.
func (s *Set) Tokens() []string {
	if s == nil {
		return nil
	}
	if s.file == "" {
		return s.static
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.checkedAt) >= FileCheckEvery {
		_ = s.reload(now)
	}
	return append(append([]string(nil), s.static...), s.fromFile...)
}

// reload reads the tokens file if it changed. Callers hold mu, or own s.
func (s *Set) reload(now time.Time) error {
	s.checkedAt = now
	fi, err := os.Stat(s.file)
	if err != nil {
		return fmt.Errorf("reading the tokens file: %w", err)
	}
	if fi.ModTime().Equal(s.modTime) && fi.Size() == s.size && s.fromFile != nil {
		return nil
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		return fmt.Errorf("reading the tokens file: %w", err)
	}
	var tokens []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			tokens = append(tokens, line)
		}
	}
	s.fromFile, s.modTime, s.size = append([]string{}, tokens...), fi.ModTime(), fi.Size()
	return nil
}

// FromHeader returns the token of an Authorization header "Bearer <token>", and "" with why
// when the header is there but not of that form. An empty header gives "", "".
func FromHeader(header string) (token, why string) {
	if header == "" {
		return "", ""
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", "the Authorization header is not 'Bearer <token>'"
	}
	return strings.TrimSpace(token), ""
}
