package event

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidID is wrapped by every identifier validation error.
var ErrInvalidID = errors.New("flow: invalid ID")

// Limits on identifier lengths.
const (
	MaxIDLength    = 128
	MaxRunIDLength = 512
)

// ValidateRunID checks a caller-chosen run ID: 1 to 128 letters, digits, '-' or '_'. Run IDs
// become NATS subject tokens and key-value keys, so dots, wildcards and whitespace are refused.
// The '=' separator is reserved for run IDs Flow derives (children, continuations).
func ValidateRunID(id string) error {
	return validate("run ID", id, MaxIDLength, false, "(a run ID becomes a NATS subject token)")
}

// ValidateDerivedRunID checks a run ID that may have been derived by Flow: like ValidateRunID,
// but '=' separators are allowed and the limit is 512 characters.
func ValidateDerivedRunID(id string) error {
	if !strings.Contains(id, "=") {
		return ValidateRunID(id)
	}
	return validate("run ID", id, MaxRunIDLength, true, "(a run ID becomes a NATS subject token)")
}

// ValidateID checks a decision ID (step, wait, signal wait, hook or child ID): 1 to 128 letters,
// digits, '-' or '_', starting with a letter. IDs become parts of child run IDs and idempotency
// keys, and must read as stable names.
func ValidateID(kind, id string) error {
	if err := validate(kind+" ID", id, MaxIDLength, false, ""); err != nil {
		return err
	}
	if c := id[0]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
		return fmt.Errorf("%w: %s ID %q must start with a letter", ErrInvalidID, kind, id)
	}
	return nil
}

// ValidateName checks a definition, step or signal name: 1 to 128 characters without
// whitespace, dots, '*' or '>' (names can appear in NATS subjects).
func ValidateName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s name is empty", ErrInvalidID, kind)
	}
	if len(name) > MaxIDLength {
		return fmt.Errorf("%w: %s name is %d characters long; the limit is %d", ErrInvalidID, kind, len(name), MaxIDLength)
	}
	pos := 0 // in characters
	for _, r := range name {
		if r <= ' ' || r == 0x7f || r == '.' || r == '*' || r == '>' {
			return fmt.Errorf("%w: %s name %q has %q at position %d; names cannot hold whitespace, '.', '*' or '>'", ErrInvalidID, kind, name, r, pos)
		}
		pos++
	}
	return nil
}

func validate(what, id string, limit int, derived bool, why string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidID, what)
	}
	if len(id) > limit {
		return fmt.Errorf("%w: %s is %d characters long; the limit is %d", ErrInvalidID, what, len(id), limit)
	}
	// Positions count characters, and a character is quoted whole, not byte by byte.
	pos := 0
	for _, c := range id {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || derived && c == '='
		if !ok {
			if why != "" {
				why = " " + why
			}
			return fmt.Errorf("%w: %s %q has %q at position %d; use letters, digits, '-' or '_'%s", ErrInvalidID, what, id, c, pos, why)
		}
		pos++
	}
	return nil
}

// ChildRunID derives the run ID of child childID of run parent: "<parent>=<childID>".
func ChildRunID(parent, childID string) string { return parent + "=" + childID }

// SuccessorRunID derives the run ID that continues run runID at generation gen (1 for the first
// continuation): the run's ID without any generation suffix, then "=<gen>". Decision IDs start
// with a letter, so a numeric suffix is always a generation.
func SuccessorRunID(runID string, gen int) string {
	if i := strings.LastIndexByte(runID, '='); i >= 0 {
		if _, err := strconv.Atoi(runID[i+1:]); err == nil {
			runID = runID[:i]
		}
	}
	return runID + "=" + strconv.Itoa(gen)
}
