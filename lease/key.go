package lease

import (
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
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

// Resource scopes the resource name to the key: fence.JoinResource of
// AccountID, SessionID and name, each part escaped so that different
// (key, name) triples never give the same resource, e.g. ("a/b", "c") and
// ("a", "b/c"). Guards keep one token mark per resource and refuse a lower
// token: a resource written under the leases of several keys (one table
// shared by every conversation) would refuse one key's valid writes after
// another key's larger token. Give each key its own resources with
// Resource. The result can be up to three times longer than its parts;
// guards check its length (fence.ValidateResource).
func (k Key) Resource(name string) string {
	return fence.JoinResource(k.AccountID, k.SessionID, name)
}

// Scope is the prefix of every name Resource builds for k
// (fence.JoinResource of AccountID and SessionID), and the Scope of the
// claim a lease of k carries: a strict guard refuses that claim for any
// resource outside it (fence.CheckScope), such as another key's Resource.
func (k Key) Scope() string {
	return fence.JoinResource(k.AccountID, k.SessionID)
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
