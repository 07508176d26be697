package pgguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
)

// retryable is an error pgconn.SafeToRetry accepts: nothing was sent.
type retryable struct{}

func (retryable) Error() string     { return "not sent" }
func (retryable) SafeToRetry() bool { return true }

// notCommitted separates errors that prove a committing request failed
// from those after which it may have committed.
func TestNotCommitted(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"never sent", fmt.Errorf("wrapped: %w", retryable{}), true},
		{"conn closed (pgx: also after sending)", fmt.Errorf("wrapped: %w", pgconn.ErrConnClosed), false},
		{"tx closed", pgx.ErrTxClosed, true},
		{"commit answered rollback", pgx.ErrTxCommitRollback, true},
		{"serialization failure", &pgconn.PgError{Severity: "ERROR", Code: "40001"}, true},
		{"deferred constraint", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, true},
		{"statement timeout", &pgconn.PgError{Severity: "ERROR", Code: "57014"}, true},
		{"admin shutdown", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, false},
		{"fatal, localized", &pgconn.PgError{Severity: "FATAL", Code: "XX000"}, false},
		{"connection exception", &pgconn.PgError{Severity: "ERROR", Code: "08006"}, false},
		{"cancelled in flight", context.Canceled, false},
		{"deadline in flight", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"connection reset", io.ErrUnexpectedEOF, false},
		{"other", errors.New("boom"), false},
	} {
		assert.Equal(t, tc.want, notCommitted(tc.err), tc.name)
	}
}
