package gcsguard

import (
	"errors"

	"github.com/fencekit/fencekit/fence"
)

// ErrInvalidOptions is matched by errors about malformed PutOptions, a nil
// reader or a size below -1. Nothing is written.
var ErrInvalidOptions = errors.New("gcsguard: invalid put options")

// configErr is the *fence.ConfigError of a gcsguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "gcsguard", Field: field, Reason: reason, Err: err}
}
