package lease

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxHolderLen is the longest holder label, in bytes.
const MaxHolderLen = 64

// ErrInvalidHolder is matched by the error for a holder label that fails
// ValidateHolder. Nothing was sent.
var ErrInvalidHolder = errors.New("lease: invalid holder label")

// ValidateHolder accepts the empty label (none) and labels of at most
// MaxHolderLen bytes of valid UTF-8 without control characters. The error
// matches ErrInvalidHolder.
func ValidateHolder(label string) error {
	switch {
	case len(label) > MaxHolderLen:
		return fmt.Errorf("%w: longer than %d bytes (%d)", ErrInvalidHolder, MaxHolderLen, len(label))
	case !utf8.ValidString(label):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidHolder)
	}
	for i, r := range label {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %s at byte %d", ErrInvalidHolder, strconv.QuoteRune(r), i)
		}
	}
	return nil
}

// nullable maps the empty label to SQL NULL.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
