package lease

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxIDLen is the longest AccountID or SessionID, in bytes.
const MaxIDLen = 256

// Key names one lease: an execution slot per (account, session).
type Key struct {
	AccountID string
	SessionID string
}

// String renders the key for logs and errors.
func (k Key) String() string {
	return strconv.Quote(k.AccountID) + "/" + strconv.Quote(k.SessionID)
}

// Validate checks both ids: non-empty, at most MaxIDLen bytes, valid UTF-8,
// no NUL or other control characters. The error is a *KeyError matching
// ErrInvalidKey.
func (k Key) Validate() error {
	if err := validateID("AccountID", k.AccountID); err != nil {
		return err
	}
	return validateID("SessionID", k.SessionID)
}

func validateID(field, s string) error {
	switch {
	case s == "":
		return &KeyError{Field: field, Reason: "empty"}
	case len(s) > MaxIDLen:
		return &KeyError{Field: field, Reason: "longer than " + strconv.Itoa(MaxIDLen) + " bytes (" + strconv.Itoa(len(s)) + ")"}
	case !utf8.ValidString(s):
		return &KeyError{Field: field, Reason: "not valid UTF-8"}
	}
	for i, r := range s {
		if r == 0 {
			return &KeyError{Field: field, Reason: "contains NUL at byte " + strconv.Itoa(i)}
		}
		if unicode.IsControl(r) {
			return &KeyError{Field: field, Reason: "contains control character " + strconv.QuoteRune(r) + " at byte " + strconv.Itoa(i)}
		}
	}
	return nil
}
