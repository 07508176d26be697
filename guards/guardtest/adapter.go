package guardtest

import (
	"context"
	"errors"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// Store is the plain key-value store FromGuard writes through. Put stores
// value as written by token; Get returns the stored value and its token.
// Store does no fencing of its own: that is the guard's job.
type Store interface {
	Put(ctx context.Context, resource string, token fence.Token, value string) error
	Get(ctx context.Context, resource string) (value string, token fence.Token, found bool, err error)
}

// ContextGuard is a fence.Guard with a ctx-first form: Do runs write under
// the claim ctx carries (fence.ClaimFromContext), refusing a ctx without one
// with an error matching fence.ErrNoToken, exactly as Fence runs it under an
// explicit token. memguard.Guard is one.
type ContextGuard interface {
	fence.Guard
	Do(ctx context.Context, resource string, write func(ctx context.Context) error) error
}

// ErrInjected is the error the write callback of FromGuard's WriteFailing
// returns.
var ErrInjected = errors.New("guardtest: injected write failure")

// FromGuard returns a Subject whose Write runs store.Put inside g.Fence and
// whose Read is store.Get. The Subject also implements Fencer (Guard
// returns g), FailingWriter (its
// callback returns ErrInjected without touching store) and ClaimWriter
// (WriteClaim calls g.Fence(fence.WithClaim(ctx, c), resource, c.Token, ...),
// so a guard that takes the run identity from ctx with fence.ClaimFor is
// checked for token reuse). When g is a ContextGuard, the Subject is also a
// ContextWriter whose WriteContext runs store.Put inside g.Do, storing the
// token that the callback's ctx carries.
//
// Use it for guards whose write callback is an arbitrary function, such as
// memguard. It checks the guard's admission and ordering; it cannot check
// that the guard makes a store's effects atomic with the mark, because
// store's effects happen inside the callback the guard is handed.
func FromGuard(g fence.Guard, store Store) Subject {
	s := &guardSubject{g: g, store: store}
	if cg, ok := g.(ContextGuard); ok {
		return &contextGuardSubject{guardSubject: s, cg: cg}
	}
	return s
}

type guardSubject struct {
	g     fence.Guard
	store Store
}

func (s *guardSubject) Write(ctx context.Context, resource string, token fence.Token, value string) error {
	return s.g.Fence(ctx, resource, token, func(ctx context.Context) error {
		return s.store.Put(ctx, resource, token, value)
	})
}

func (s *guardSubject) WriteClaim(ctx context.Context, resource string, c fence.Claim, value string) error {
	return s.g.Fence(fence.WithClaim(ctx, c), resource, c.Token, func(ctx context.Context) error {
		return s.store.Put(ctx, resource, c.Token, value)
	})
}

func (s *guardSubject) Guard() fence.Guard { return s.g }

func (s *guardSubject) Read(ctx context.Context, resource string) (string, fence.Token, bool, error) {
	return s.store.Get(ctx, resource)
}

func (s *guardSubject) WriteFailing(ctx context.Context, resource string, token fence.Token) error {
	return s.g.Fence(ctx, resource, token, func(context.Context) error { return ErrInjected })
}

// FromGuardStrict is FromGuard(g, store) plus a StrictWriter: WriteStrict
// runs store.Put inside strict.Fence(fence.WithClaim(ctx, c), resource,
// c.Token, ...). strict is a guard of the same kind as g configured to be
// strict (for example memguard.New(memguard.Config{Strict: true})); it may
// keep marks of its own.
func FromGuardStrict(g, strict fence.Guard, store Store) Subject {
	s := FromGuard(g, store)
	if cs, ok := s.(*contextGuardSubject); ok {
		return &strictContextSubject{contextGuardSubject: cs, strict: strict}
	}
	return &strictSubject{guardSubject: s.(*guardSubject), strict: strict}
}

type strictSubject struct {
	*guardSubject
	strict fence.Guard
}

func (s *strictSubject) WriteStrict(ctx context.Context, resource string, c fence.Claim, value string) error {
	return writeStrict(ctx, s.strict, s.store, resource, c, value)
}

type strictContextSubject struct {
	*contextGuardSubject
	strict fence.Guard
}

func (s *strictContextSubject) WriteStrict(ctx context.Context, resource string, c fence.Claim, value string) error {
	return writeStrict(ctx, s.strict, s.store, resource, c, value)
}

func writeStrict(ctx context.Context, g fence.Guard, store Store, resource string, c fence.Claim, value string) error {
	return g.Fence(fence.WithClaim(ctx, c), resource, c.Token, func(ctx context.Context) error {
		return store.Put(ctx, resource, c.Token, value)
	})
}

type contextGuardSubject struct {
	*guardSubject
	cg ContextGuard
}

func (s *contextGuardSubject) WriteContext(ctx context.Context, resource, value string) error {
	return s.cg.Do(ctx, resource, func(ctx context.Context) error {
		// A guard that wrongly runs write without a claim stores token 0,
		// which the checks see.
		tok, _ := fence.FromContext(ctx)
		return s.store.Put(ctx, resource, tok, value)
	})
}

// mapStore is an in-memory Store, safe for concurrent use.
type mapStore struct {
	mu sync.Mutex
	m  map[string]resState
}

// NewMapStore returns an empty in-memory Store, safe for concurrent use.
func NewMapStore() Store { return &mapStore{m: map[string]resState{}} }

// Put implements Store.
func (m *mapStore) Put(_ context.Context, resource string, token fence.Token, value string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[resource] = found(value, token)
	return nil
}

// Get implements Store.
func (m *mapStore) Get(_ context.Context, resource string) (string, fence.Token, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[resource]
	return s.Value, s.Token, ok, nil
}
