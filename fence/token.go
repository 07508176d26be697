package fence

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Token is a fencing token: a positive number that orders the grants of one
// lease key. The zero Token means "no token" and is never valid.
type Token int64

// MaxTokenLen is the longest decimal text [Parse] accepts (len of MaxInt64).
const MaxTokenLen = 19

// ErrInvalidToken is matched (errors.Is) by every error about malformed or
// out-of-range token input.
var ErrInvalidToken = errors.New("fence: invalid token")

// ParseError reports why a token string was rejected.
type ParseError struct {
	Input  string // the rejected input, truncated to 64 bytes
	Reason string // human-readable reason
}

// Error implements error.
func (e *ParseError) Error() string {
	return fmt.Sprintf("fence: invalid token %q: %s", e.Input, e.Reason)
}

// Is reports whether target is ErrInvalidToken.
func (e *ParseError) Is(target error) bool { return target == ErrInvalidToken }

func parseErr(s, reason string) error {
	if len(s) > 64 {
		s = s[:64]
	}
	return &ParseError{Input: s, Reason: reason}
}

// Parse reads a token in canonical decimal form. It rejects the empty string,
// signs, spaces, leading zeros, non-ASCII digits, hex and values outside
// 1..math.MaxInt64.
func Parse(s string) (Token, error) {
	if s == "" {
		return 0, parseErr(s, "empty")
	}
	if len(s) > MaxTokenLen {
		return 0, parseErr(s, "too long")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '0' || c > '9' {
			return 0, parseErr(s, "not a decimal digit string")
		}
	}
	if s[0] == '0' {
		if len(s) == 1 {
			return 0, parseErr(s, "zero is not a valid token")
		}
		return 0, parseErr(s, "leading zero")
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > math.MaxInt64 {
		return 0, parseErr(s, "out of range")
	}
	return Token(v), nil
}

// Valid reports whether t is a usable token (t > 0).
func (t Token) Valid() bool { return t > 0 }

// Validate returns an error matching ErrInvalidToken unless t is valid.
func (t Token) Validate() error {
	if t.Valid() {
		return nil
	}
	return &ParseError{Input: strconv.FormatInt(int64(t), 10), Reason: "token must be positive"}
}

// String formats t in the canonical decimal form Parse accepts.
func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }

// MarshalText implements encoding.TextMarshaler. Invalid tokens fail.
func (t Token) MarshalText() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using Parse.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}
