package objtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// HeldWriter is a guardtest Subject of an object-store guard whose writes
// can go through a HoldTransport.
type HeldWriter interface {
	guardtest.Subject
	guardtest.ClaimWriter
	// WriteHolding is WriteClaim through the guard whose client holds the
	// first committing request of resource; it returns that request (nil:
	// none was sent) and the write's error.
	WriteHolding(ctx context.Context, resource string, c fence.Claim, value string) (*Held, error)
}

// DeliverFunc is a guardtest.DuplicateWriter's deliver function for h.
func DeliverFunc(h *Held) func(context.Context) error {
	return func(ctx context.Context) error {
		if h == nil {
			return fmt.Errorf("no committing request was held: %w", guardtest.ErrNothingHeld)
		}
		return h.Deliver(ctx)
	}
}

// CheckDelayedCopyRefused checks that guardtest's delayed-duplicate check
// is not vacuous for an object store: with resource at "base" under
// (5, run-a), a write of "first" under the same claim whose first
// committing request is held reports success (the client's retry landed);
// a later write of "later" under the same claim is accepted; the held
// copy, delivered then, is answered 412 (its precondition names the version
// the later write replaced); and "later" at token 5 stays.
func CheckDelayedCopyRefused(ctx context.Context, s HeldWriter, resource string) error {
	c := fence.Claim{Token: 5, Run: "run-a"}
	if err := s.WriteClaim(ctx, resource, c, "base"); err != nil {
		return err
	}
	h, err := s.WriteHolding(ctx, resource, c, "first")
	if h == nil {
		return fmt.Errorf("no committing request held (write: %w)", err)
	}
	if err != nil {
		return fmt.Errorf("delayed write: %w, want the client's retry to land", err)
	}
	if err := s.WriteClaim(ctx, resource, c, "later"); err != nil {
		return err
	}
	if err := h.Deliver(ctx); err != nil {
		return err
	}
	var errs []error
	if h.Status != http.StatusPreconditionFailed {
		errs = append(errs, fmt.Errorf("held copy answered %d, want 412", h.Status))
	}
	if v, tok, ok, err := s.Read(ctx, resource); err != nil || !ok || v != "later" || tok != 5 {
		errs = append(errs, fmt.Errorf("after the held copy: %q %d %v %s, want later at 5", v, tok, ok, errText(err)))
	}
	return errors.Join(errs...)
}

// CheckNilContext calls each of calls (a guard call given a nil context,
// by name) and checks that it returns an error matching
// fence.ErrNilArgument instead of panicking.
func CheckNilContext(calls map[string]func() error) error {
	want := fence.ErrNilArgument
	var errs []error
	for name, call := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					errs = append(errs, fmt.Errorf("%s(nil ctx) panicked: %v", name, r))
				}
			}()
			if err := call(); !errors.Is(err, want) {
				errs = append(errs, fmt.Errorf("%s(nil ctx): %s, want %w", name, errText(err), want))
			}
		}()
	}
	return errors.Join(errs...)
}

// CheckNotFound checks that GetBytes, Stat, and each of reads (by name), of a
// resource without content — never written ("nf/never"), and deleted by
// g under token 2 ("nf/deleted") — return an error matching
// fence.ErrNotFound.
func CheckNotFound[O, I any](ctx context.Context, g Guard[O, I], reads map[string]func(ctx context.Context, resource string) error) error {
	if _, err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 2}), "nf/deleted"); err != nil {
		return err
	}
	all := map[string]func(ctx context.Context, resource string) error{
		"GetBytes": func(ctx context.Context, r string) error { _, _, err := g.GetBytes(ctx, r); return err },
		"Stat":     func(ctx context.Context, r string) error { _, err := g.Stat(ctx, r); return err },
	}
	maps.Copy(all, reads)
	var errs []error
	for _, r := range []string{"nf/never", "nf/deleted"} {
		for name, read := range all {
			if err := read(ctx, r); !errors.Is(err, fence.ErrNotFound) {
				errs = append(errs, fmt.Errorf("%s(%q): %s, want fence.ErrNotFound", name, r, errText(err)))
			}
		}
	}
	return errors.Join(errs...)
}

// errText is err's message, or "nil".
func errText(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
