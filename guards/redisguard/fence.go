package redisguard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
)

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Fence write callback.
var ErrNoStager = errors.New("redisguard: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete when the current
// Fence write has already staged a change.
var ErrAlreadyStaged = errors.New("redisguard: this write has already staged a change")

// ErrStageClosed is returned by Stage and StageDelete when the Fence call
// whose context they were given has returned.
var ErrStageClosed = errors.New("redisguard: the Fence call of this context has returned")

// ErrNilWrite is returned by Fence when its write callback is nil.
var ErrNilWrite = errors.New("redisguard: Fence with a nil write")

type stageKey struct{}

// stage is what one Fence write callback staged.
type stage struct {
	mu     sync.Mutex
	op     string // "m" (nothing staged), "p" or "d"
	value  []byte
	closed bool
}

func (s *stage) set(op string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrStageClosed
	case s.op != "m":
		return ErrAlreadyStaged
	}
	s.op, s.value = op, value
	return nil
}

// Stage records value as the new value of the resource a running Fence
// call guards; Fence writes it, with the mark, once the callback returns
// nil. ctx must be (derived from) the callback's context.
func Stage(ctx context.Context, value []byte) error {
	if ctx == nil {
		return ErrNoStager
	}
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set("p", value)
}

// StageDelete records the deletion of the resource's value (its mark stays).
func StageDelete(ctx context.Context) error {
	if ctx == nil {
		return ErrNoStager
	}
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set("d", nil)
}

var _ fence.Guard = (*Guard)(nil)

// Fence implements fence.Guard for code written against that interface
// (httpguard's middleware, for one). It reads resource's mark and, if
// token is admitted (with the run ctx carries for that token,
// fence.ClaimFor), runs write; write states the new value with Stage (or
// StageDelete) on its ctx. When write returns nil, the staged change is
// written with the mark in one script that decides again, so a write
// admitted by the first read but overtaken meanwhile is refused as stale.
// A write that staged nothing raises the mark only. If write fails nothing
// is written. Effects of write outside Redis are not fenced.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if ctx == nil {
		return ErrNilContext
	}
	c := fence.ClaimFor(ctx, token)
	if err := g.args(ctx, resource, c); err != nil {
		return err
	}
	return g.fence(ctx, resource, c, write)
}

// Do is Fence under the claim ctx carries (fence.ClaimFromContext; none:
// fence.ErrNoToken, write not called).
func (g *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	if ctx == nil {
		return ErrNilContext
	}
	c, err := g.ctxClaim(ctx, resource)
	if err != nil {
		return err
	}
	return g.fence(ctx, resource, c, write)
}

func (g *Guard) fence(ctx context.Context, resource string, c fence.Claim, write func(ctx context.Context) error) error {
	if write == nil {
		return ErrNilWrite
	}
	m, err := g.peek(ctx, resource)
	if err != nil {
		return err
	}
	if err := fence.DecideClaim(resource, c, m.Token, m.Run); err != nil {
		g.rec.Decision(ctx, err)
		g.rec.Refused(ctx, resource, c, err)
		return err
	}
	st := &stage{op: "m"}
	werr := write(context.WithValue(ctx, stageKey{}, st))
	st.mu.Lock()
	st.closed = true
	op, value := st.op, st.value
	st.mu.Unlock()
	if werr != nil {
		return fence.WrapContext(ctx, werr)
	}
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("redisguard: %q: %w", resource, err)
	}
	return g.write(ctx, resource, c, op, value)
}

// peek reads resource's mark and checks, in the same round trip, that its
// value key is a string or absent: a key of another type is not this
// guard's to replace (*MarkError), and the callback must not run.
func (g *Guard) peek(ctx context.Context, resource string) (fence.Claim, error) {
	key := g.markKey(resource)
	var hm *redis.SliceCmd
	var typ *redis.StatusCmd
	_, err := g.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		hm = p.HMGet(ctx, key, "t", "r", "w")
		typ = p.Type(ctx, resource)
		return nil
	})
	if err != nil && !redis.HasErrorPrefix(hm.Err(), "WRONGTYPE") {
		return fence.Claim{}, fence.WrapContext(ctx, fmt.Errorf("redisguard: read mark of %q: %w", resource, err))
	}
	if redis.HasErrorPrefix(hm.Err(), "WRONGTYPE") {
		return fence.Claim{}, &MarkError{Resource: resource, Key: key, Reason: "mark key is not a hash"}
	}
	if t := typ.Val(); t != "none" && t != "string" {
		return fence.Claim{}, &MarkError{Resource: resource, Key: resource, Reason: "value key holds a " + t}
	}
	v := hm.Val()
	if v[0] == nil && v[1] == nil && v[2] == nil {
		return fence.Claim{}, nil
	}
	str := func(x any) string { s, _ := x.(string); return s }
	info, err := g.info(resource, str(v[0]), str(v[1]), str(v[2]))
	return fence.Claim{Token: info.Token, Run: info.Run}, err
}
