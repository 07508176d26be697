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

// Option adjusts one grant of Acquire, AcquireWait, Takeover or Run.
type Option func(*grantOptions)

type grantOptions struct {
	holder string
}

// WithHolder labels the grant with who holds it ("desktop", "browser"), so
// that Inspect, a refused caller's *HeldError and the status handler can say
// so. The label is stored with the grant and replaced by the next one; it
// is checked by ValidateHolder when the call is made. Empty means none.
func WithHolder(label string) Option {
	return func(o *grantOptions) { o.holder = label }
}

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

// grantOpts applies opts and validates the result.
func grantOpts(opts []Option) (grantOptions, error) {
	if len(opts) == 0 {
		return grantOptions{}, nil // the common call: nothing to apply, nothing allocated
	}
	var o grantOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o, ValidateHolder(o.holder)
}

// nullable maps the empty label to SQL NULL.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
