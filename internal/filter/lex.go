// Package filter is the list filter language of run listings (`flow runs --where`, the list
// API's where, the UI's filter box): a lexer and parser, a type checker that knows the built-in
// fields of every run and the declared search attributes, and an evaluator over a run's summary.
// docs/search.md documents the language; in short:
//
//	customer = "c-42" and status = "running" and started > "2026-12-01"
//	amount >= 100 or tags contains "vip"
//	not (status in ("completed", "cancelled"))
//
// Compile parses and checks a filter once; the Filter it returns is safe for concurrent use and
// allocates nothing per run it matches beyond decoding attribute values.
package filter

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalid matches every *Error.
var ErrInvalid = errors.New("flow: invalid filter")

// Error is a filter that does not parse or does not type-check: Msg says what is wrong and what
// to write instead, Pos is the byte offset in Src where it was found.
type Error struct {
	Src string
	Pos int
	Msg string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid filter at column %d: %s", e.Pos+1, e.Msg)
}

// Is matches ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Limits of a filter, so that a listing request cannot make the service parse or evaluate
// without bound.
const (
	MaxLength = 4096
	MaxDepth  = 100
	MaxTerms  = 256
)

type tokenKind int

const (
	tokEOF tokenKind = iota
	tokName
	tokString
	tokNumber
	tokOp     // = != < <= > >=
	tokLParen // (
	tokRParen // )
	tokComma  // ,
	// keywords, matched case-insensitively
	tokAnd
	tokOr
	tokNot
	tokIn
	tokContains
	tokTrue
	tokFalse
)

// punctuation maps the characters that are tokens by themselves to their kinds.
var punctuation = map[byte]tokenKind{'(': tokLParen, ')': tokRParen, ',': tokComma}

var keywords = map[string]tokenKind{"and": tokAnd, "or": tokOr, "not": tokNot, "in": tokIn, "contains": tokContains,
	"true": tokTrue, "false": tokFalse}

type token struct {
	kind tokenKind
	// text is the name, the operator, the number as written, or the string's decoded value.
	text string
	pos  int
}

func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "the end of the filter"
	case tokString:
		return fmt.Sprintf("string %q", t.text)
	case tokNumber:
		return "number " + t.text
	case tokName:
		return fmt.Sprintf("name %q", t.text)
	}
	return fmt.Sprintf("%q", t.text)
}

// lex splits src into tokens, ending with tokEOF.
func lex(src string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case punctuation[c] != tokEOF:
			toks = append(toks, token{punctuation[c], string(c), i})
			i++
		case c == '=':
			toks = append(toks, token{tokOp, "=", i})
			i++
			if i < len(src) && src[i] == '=' {
				return nil, &Error{src, i - 1, `"==" is not an operator; write "=" for equality`}
			}
		case c == '!':
			if i+1 < len(src) && src[i+1] == '=' {
				toks = append(toks, token{tokOp, "!=", i})
				i += 2
				continue
			}
			return nil, &Error{src, i, `"!" alone is not an operator; write "!=" for inequality, or "not" to negate`}
		case c == '<' || c == '>':
			op := string(c)
			if i+1 < len(src) && src[i+1] == '=' {
				op += "="
			} else if c == '<' && i+1 < len(src) && src[i+1] == '>' {
				return nil, &Error{src, i, `"<>" is not an operator; write "!=" for inequality`}
			}
			toks = append(toks, token{tokOp, op, i})
			i += len(op)
		case c == '"' || c == '\'':
			s, n, err := lexString(src, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tokString, s, i})
			i += n
		case c == '-' || c == '.' || '0' <= c && c <= '9':
			n := lexNumber(src[i:])
			if n == 0 || n == 1 && (c == '-' || c == '.') {
				return nil, &Error{src, i, fmt.Sprintf("%q does not start a number; write numbers like 42, -7 or 4.25", string(c))}
			}
			if i+n < len(src) && isNameByte(src[i+n]) {
				return nil, &Error{src, i, fmt.Sprintf("%q is not a number; quote text (%q)", src[i:i+n+nameLen(src[i+n:])], src[i:i+n+nameLen(src[i+n:])])}
			}
			if j := i + n; j+1 < len(src) && (src[j] == '-' || src[j] == ':') && '0' <= src[j+1] && src[j+1] <= '9' {
				end := j
				for end < len(src) && (isNameByte(src[end]) || strings.IndexByte("-:.+", src[end]) >= 0) {
					end++
				}
				return nil, &Error{src, i, fmt.Sprintf("%s looks like a date or time; quote it: %q", src[i:end], src[i:end])}
			}
			toks = append(toks, token{tokNumber, src[i : i+n], i})
			i += n
		case isNameStart(c):
			n := nameLen(src[i:])
			word := src[i : i+n]
			if k, ok := keywords[strings.ToLower(word)]; ok {
				toks = append(toks, token{k, strings.ToLower(word), i})
			} else {
				toks = append(toks, token{tokName, word, i})
			}
			i += n
		default:
			r, _ := utf8.DecodeRuneInString(src[i:])
			return nil, &Error{src, i, fmt.Sprintf("unexpected character %q; names are letters, digits and '_', text is quoted, and the operators are = != < <= > >= in contains and or not", r)}
		}
	}
	return append(toks, token{tokEOF, "", len(src)}), nil
}

func isNameStart(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' }
func isNameByte(c byte) bool  { return isNameStart(c) || '0' <= c && c <= '9' }

func nameLen(s string) int {
	n := 0
	for n < len(s) && isNameByte(s[n]) {
		n++
	}
	return n
}

// lexNumber returns the length of the number at the start of s: an optional '-', digits, an
// optional fraction and an optional exponent.
func lexNumber(s string) int {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		return i - j
	}
	n := digits()
	if i < len(s) && s[i] == '.' {
		i++
		n += digits()
	}
	if n == 0 {
		return 0
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			i = j
		}
	}
	return i
}

// lexString reads the quoted string at src[at:], returning its value and its length in src.
// Backslash escapes \" \' \\ \n \t \r are decoded; any other escape is an error.
func lexString(src string, at int) (string, int, error) {
	quote := src[at]
	var b strings.Builder
	for i := at + 1; i < len(src); i++ {
		c := src[i]
		switch {
		case c == quote:
			return b.String(), i + 1 - at, nil
		case c == '\\':
			if i+1 >= len(src) {
				break
			}
			i++
			switch src[i] {
			case '"', '\'', '\\':
				b.WriteByte(src[i])
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			default:
				return "", 0, &Error{src, i - 1, fmt.Sprintf(`unknown escape "\%c" in a string; use \" \' \\ \n \t or \r`, src[i])}
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, &Error{src, at, fmt.Sprintf("the string that starts here has no closing %c", quote)}
}
