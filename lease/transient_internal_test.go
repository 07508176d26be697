package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestTransientErrors: what AcquireWait retries until its ctx ends, and
// what it returns at once.
func TestTransientErrors(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("lease: acquire k: %w", &pgconn.PgError{Code: code}) }
	for _, err := range []error{
		pg("25006"), pg("57P01"), pg("57P02"), pg("57P03"), pg("08006"), pg("08001"),
		fmt.Errorf("lease: acquire k: %w", &FailoverError{Checked: "a", Node: "b"}),
		fmt.Errorf("lease: acquire k: %w", &TokenFloorError{Token: 3, Floor: 9}),
		fmt.Errorf("lease: acquire k: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("lease: acquire k: %w", context.DeadlineExceeded), // the attempt's own CallTimeout
	} {
		if !transient(err) {
			t.Errorf("%v: not retried", err)
		}
	}
	for _, err := range []error{
		pg("42P01"), pg("42501"), pg("23505"),
		&HeldError{}, ErrClosed, fmt.Errorf("%w: no", ErrUnauthorized), &KeyError{Field: "AccountID"},
		fmt.Errorf("%w (x): %w", ErrBusy, &pgconn.PgError{Code: "40001"}),
	} {
		if transient(err) {
			t.Errorf("%v: retried as transient", err)
		}
	}
	// waitEnded keeps the ctx error, its cause and the last attempt's error.
	cause := errors.New("user gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	last := pg("25006")
	err := waitEnded(ctx, Key{AccountID: "a", SessionID: "s"}, last)
	var pe *pgconn.PgError
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) || !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("waitEnded: %v", err)
	}
	if err := waitEnded(ctx, Key{}, nil); !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("waitEnded without an attempt: %v", err)
	}
}
