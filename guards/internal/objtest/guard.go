package objtest

import (
	"context"
	"io"

	"github.com/fencekit/fencekit/fence"
)

// Guard is the method set that s3guard.Guard and gcsguard.Guard share,
// over their PutOptions O and Info I: the one shape of the object-store
// guards. Their tests assert it at compile time.
type Guard[O, I any] interface {
	Put(ctx context.Context, resource string, r io.Reader, size int64, opts O) (I, error)
	PutBytes(ctx context.Context, resource string, b []byte, opts O) (I, error)
	Delete(ctx context.Context, resource string) (I, error)
	Do(ctx context.Context, resource string, write func(ctx context.Context) error) error
	Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error
	Get(ctx context.Context, resource string) (io.ReadCloser, I, error)
	GetBytes(ctx context.Context, resource string) ([]byte, I, error)
	Mark(ctx context.Context, resource string) (fence.Claim, error)
	Stat(ctx context.Context, resource string) (I, error)
	Sweep(ctx context.Context, resource string) (int, error)
}

// NilContextCalls returns, by name, a call of each of g's methods on
// resource with a nil context; Fence and Do get write. Add the guard's
// other calls and pass them to CheckNilContext.
//
//nolint:staticcheck // a nil context is the input under test
func NilContextCalls[O, I any](g Guard[O, I], resource string, write func(context.Context) error) map[string]func() error {
	var opts O
	v := []byte("v")
	return map[string]func() error{
		"Put":      func() error { _, err := g.PutBytes(nil, resource, v, opts); return err },
		"Delete":   func() error { _, err := g.Delete(nil, resource); return err },
		"Get":      func() error { _, _, err := g.Get(nil, resource); return err },
		"GetBytes": func() error { _, _, err := g.GetBytes(nil, resource); return err },
		"Mark":     func() error { _, err := g.Mark(nil, resource); return err },
		"Stat":     func() error { _, err := g.Stat(nil, resource); return err },
		"Sweep":    func() error { _, err := g.Sweep(nil, resource); return err },
		"Fence":    func() error { return g.Fence(nil, resource, 1, write) },
		"Do":       func() error { return g.Do(nil, resource, write) },
	}
}
