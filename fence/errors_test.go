package fence

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each shared error type matches its sentinel through any wrapping, is
// found by errors.As, and names its source, resource and details.
func TestErrorTypesMatchTheirSentinels(t *testing.T) {
	nf := fmt.Errorf("read: %w", &NotFoundError{Source: "fileguard", Resource: "doc/1", Deleted: true, Token: 7})
	require.ErrorIs(t, nf, ErrNotFound)
	require.NotErrorIs(t, nf, ErrForeign)
	var nfe *NotFoundError
	require.ErrorAs(t, nf, &nfe)
	require.Equal(t, "doc/1", nfe.Resource)
	require.Equal(t, `read: fileguard: "doc/1" not found: deleted under token 7`, nf.Error())
	require.Equal(t, `redisguard: "k" not found (mark 3: no value)`, (&NotFoundError{Source: "redisguard", Resource: "k", Token: 3}).Error())
	require.Equal(t, `s3guard: "k" not found`, (&NotFoundError{Source: "s3guard", Resource: "k"}).Error())

	fe := fmt.Errorf("put: %w", &ForeignError{Source: "natsguard", Resource: "r", Key: "fk.r", Version: 12, Reason: "no token header"})
	require.ErrorIs(t, fe, ErrForeign)
	require.NotErrorIs(t, fe, ErrNotFound)
	var fee *ForeignError
	require.ErrorAs(t, fe, &fee)
	require.Equal(t, int64(12), fee.Version)
	require.Equal(t, `put: natsguard: "r": fk.r (version 12): not written by natsguard, or unreadable: no token header`, fe.Error())
	require.Equal(t, `s3guard: "r": not written by s3guard, or unreadable: bad magic`, (&ForeignError{Source: "s3guard", Resource: "r", Reason: "bad magic"}).Error())

	cause := errors.New("no such schema")
	ce := fmt.Errorf("new: %w", &ConfigError{Source: "pgguard", Field: "Schema", Reason: "not a valid identifier", Err: cause})
	require.ErrorIs(t, ce, ErrInvalidConfig)
	require.ErrorIs(t, ce, cause, "unwraps to Err")
	require.Equal(t, "new: pgguard: invalid config Schema: not a valid identifier: no such schema", ce.Error())
	// A Reason that is Err's text is not repeated.
	require.Equal(t, "lease: invalid config Schema: no such schema",
		(&ConfigError{Source: "lease", Field: "Schema", Reason: cause.Error(), Err: cause}).Error())
	require.NotErrorIs(t, &ConfigError{Source: "lease", Field: "TTL", Reason: "negative"}, ErrNilArgument)
}
