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

// ErrInjected is the error the write callback of FromGuard's WriteFailing
// returns.
var ErrInjected = errors.New("guardtest: injected write failure")

// FromGuard returns a Subject whose Write runs store.Put inside g.Fence and
// whose Read is store.Get. The Subject also implements FailingWriter: its
// callback returns ErrInjected without touching store.
//
// Use it for guards whose write callback is an arbitrary function, such as
// memguard. It checks the guard's admission and ordering; it cannot check
// that the guard makes a store's effects atomic with the mark, because
// store's effects happen inside the callback the guard is handed.
func FromGuard(g fence.Guard, store Store) Subject {
	return &guardSubject{g: g, store: store}
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

func (s *guardSubject) Read(ctx context.Context, resource string) (string, fence.Token, bool, error) {
	return s.store.Get(ctx, resource)
}

func (s *guardSubject) WriteFailing(ctx context.Context, resource string, token fence.Token) error {
	return s.g.Fence(ctx, resource, token, func(context.Context) error { return ErrInjected })
}

// MapStore is an in-memory Store, safe for concurrent use.
type MapStore struct {
	mu sync.Mutex
	m  map[string]State
}

// NewMapStore returns an empty MapStore.
func NewMapStore() *MapStore { return &MapStore{m: map[string]State{}} }

// Put implements Store.
func (m *MapStore) Put(_ context.Context, resource string, token fence.Token, value string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[resource] = found(value, token)
	return nil
}

// Get implements Store.
func (m *MapStore) Get(_ context.Context, resource string) (string, fence.Token, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[resource]
	return s.Value, s.Token, ok, nil
}
