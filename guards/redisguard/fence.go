package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// Fence implements fence.Guard for code written against that interface
// (httpguard's middleware, for one). It reads resource's mark and, if
// token is admitted (with the run ctx carries for that token,
// fence.ClaimFor), runs write with a ctx that carries the admitted claim
// (fence.ClaimFromContext); write states the new value with fence.Stage
// (or fence.StageDelete) on its ctx. When write returns nil, the staged
// change is written with the mark in one script that decides again, so a
// write admitted by the first read but overtaken meanwhile is refused as
// stale.
// A write that staged nothing raises the mark only (a resource without a
// value keeps none). If write fails nothing is written. Effects of write
// outside Redis are not fenced.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	return g.eng.Fence(ctx, resource, token, write)
}

// Do is Fence under the claim ctx carries (fence.ClaimFromContext; none:
// fence.ErrNoToken, write not called).
func (g *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	return g.eng.Do(ctx, resource, write)
}

// driver is the Guard's part of the engine's fenced write.
type driver Guard

// attempt is one script call: the mark read first (Fence only) and the
// deadline of the last write sent.
type attempt struct {
	g        *Guard
	resource string
	mark     fence.Claim
	read     bool
	sent     time.Time
	deadline string
}

// Open reads the mark only when the engine needs it (before a Fence
// callback): the write script decides by itself.
func (d *driver) Open(ctx context.Context, resource string, read engine.Read) (engine.Attempt, error) {
	g := (*Guard)(d)
	a := &attempt{g: g, resource: resource}
	if read == engine.ReadFresh {
		m, err := g.peek(ctx, resource)
		if err != nil {
			return nil, err
		}
		a.mark, a.read = m, true
	}
	return a, nil
}

func (a *attempt) Mark() (fence.Claim, bool, bool) { return a.mark, a.read, false }

func (a *attempt) Close() {}

// Commit runs writeScript: the decision, the value and the mark in one
// step, refused when the request arrives after its deadline.
func (a *attempt) Commit(ctx context.Context, c fence.Claim, ch engine.Change, id string) (engine.Result, error) {
	g, resource := a.g, a.resource
	keys := []string{resource, g.markKey(resource), g.idsKey(resource)}
	a.sent = g.now()
	a.deadline = strconv.FormatInt(a.sent.Add(g.window).UnixMilli(), 10)
	r, err := writeScript.Run(ctx, g.client, keys,
		c.Token.String(), c.Run, id, string(rune(ch.Op)), ch.Value, g.ttlArg, a.deadline, g.windowArg).StringSlice()
	if g.afterWriteSent != nil {
		g.afterWriteSent()
	}
	switch {
	case err != nil && !maybeSent(err):
		return engine.Failed, fence.WrapContext(ctx, fmt.Errorf("redisguard: write %q: %w", resource, err))
	case err != nil:
		return engine.Lost, err
	case len(r) == 3 && r[0] == "clock":
		return engine.Failed, g.clockError(resource, a.sent, r[1])
	case len(r) == 3 && r[0] == "expired" && g.now().Sub(a.sent) < g.window/2:
		// Refused at once as too late: the server's clock is ahead of
		// this host's. Nothing was written by this copy (an applied copy
		// would have been answered "dup").
		return engine.Failed, g.clockError(resource, a.sent, r[1])
	case len(r) == 3 && (r[0] == "expired" || r[0] == "cancelled"):
		// This copy was refused: settle the write as a whole.
		return engine.Lost, fmt.Errorf("the request was refused as %s", r[0])
	}
	if err := g.outcome(resource, c, r); err != nil {
		return engine.Failed, err
	}
	return engine.Committed, nil
}

// Settle decides the outcome of write id (sent with the attempt's
// deadline) after its reply was lost, on a fresh context bounded by
// SettleTimeout: applied; definitely not applied, the write-id record
// guaranteeing it never will be; refused by the mark now in place (a
// *fence.StaleError, Overtaken when the write may have been applied before
// the newer mark, or a *fence.ReusedError); unknown
// (*fence.OutcomeUnknownError).
func (a *attempt) Settle(ctx context.Context, c fence.Claim, _ engine.Change, id string, lost error) (engine.Result, error) {
	applied, serr := a.g.settle(ctx, a.resource, c, id, a.deadline)
	switch {
	case applied:
		return engine.Committed, nil
	case serr == nil:
		return engine.NotApplied, nil
	case errors.Is(serr, errUnsettled):
		return engine.Failed, fence.OutcomeUnknown(ctx, "redisguard: write", a.resource, fmt.Errorf("%w (%w)", lost, serr))
	}
	return engine.Failed, serr
}

// peek reads resource's mark and checks, in the same round trip, that its
// value key is a string or absent: a key of another type is not this
// guard's to replace (*fence.ForeignError), and the callback must not run.
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
		return fence.Claim{}, &fence.ForeignError{Source: "redisguard", Resource: resource, Key: key, Reason: "mark key is not a hash"}
	}
	if t := typ.Val(); t != "none" && t != "string" {
		return fence.Claim{}, &fence.ForeignError{Source: "redisguard", Resource: resource, Key: resource, Reason: "value key holds a " + t}
	}
	return g.markOf(resource, hm.Val())
}

// markOf parses the fields t, r, w of a mark hash (all nil: no mark).
func (g *Guard) markOf(resource string, v []any) (fence.Claim, error) {
	if v[0] == nil && v[1] == nil && v[2] == nil {
		return fence.Claim{}, nil
	}
	str := func(x any) string { s, _ := x.(string); return s }
	info, err := g.info(resource, str(v[0]), str(v[1]), str(v[2]))
	return fence.Claim{Token: info.Token, Run: info.Run}, err
}

// clockError reports a write refused because this host's clock and the
// server's (serverMs, Unix ms) differ too much.
func (g *Guard) clockError(resource string, sent time.Time, serverMs string) error {
	ms, err := strconv.ParseInt(serverMs, 10, 64)
	if err != nil {
		return fmt.Errorf("redisguard: write %q: unexpected server time %q", resource, serverMs)
	}
	return &ClockError{Resource: resource, Window: g.window, Offset: time.UnixMilli(ms).Sub(sent)}
}

// outcome interprets writeScript's reply.
func (g *Guard) outcome(resource string, c fence.Claim, r []string) error {
	if len(r) != 3 {
		return fmt.Errorf("redisguard: write %q: unexpected reply %q", resource, r)
	}
	switch r[0] {
	case "ok", "dup":
		return nil
	case "stale", "reused":
		mt, err := fence.Parse(r[1])
		if err != nil {
			return g.foreign(resource, "malformed mark")
		}
		if derr := fence.DecideClaim(resource, c, mt, r[2]); derr != nil {
			return derr
		}
		return fmt.Errorf("redisguard: write %q: script refused %s, mark %s %q admits it", resource, r[0], r[1], r[2])
	case "bad":
		return g.foreign(resource, r[2])
	}
	return fmt.Errorf("redisguard: write %q: unexpected reply %q", resource, r)
}

// settle decides the outcome of write id (sent with deadline, Unix ms)
// after its reply was lost, on a fresh context bounded by SettleTimeout:
// applied (true, nil); definitely not applied (false, nil), the record
// guaranteeing it never will be; refused by the mark now in place (false,
// *fence.StaleError or *fence.ReusedError; the stale error's Overtaken
// set when the write may have been applied before the newer mark);
// unknown (false, error matching errUnsettled).
func (g *Guard) settle(ctx context.Context, resource string, c fence.Claim, id, deadline string) (bool, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
	defer cancel()
	r, err := settleScript.Run(sctx, g.client, []string{g.markKey(resource), g.idsKey(resource)},
		id, deadline, g.windowArg).StringSlice()
	switch {
	case err != nil:
		return false, fmt.Errorf("%w: the settling request failed: %w", errUnsettled, err)
	case len(r) != 4 || r[0] == "bad":
		return false, fmt.Errorf("%w: unexpected settling reply %q", errUnsettled, r)
	}
	if r[0] == "applied" {
		return true, nil
	}
	complete := r[3] == "1" // the record proves no copy was applied
	if r[1] == "" {
		return false, nil // no mark: not applied
	}
	mt, err := fence.Parse(r[1])
	if err != nil {
		return false, fmt.Errorf("%w: malformed mark %q", errUnsettled, r[1])
	}
	if derr := fence.DecideClaim(resource, c, mt, r[2]); derr != nil {
		if se, ok := fence.IsStale(derr); ok {
			se.Overtaken = !complete
		}
		return false, derr
	}
	if complete || mt < c.Token {
		return false, nil // not applied (a mark below the write's token never had it)
	}
	// The record of this write may have been pruned (the settling request
	// came more than a window after the deadline) and the mark has the
	// write's token under another write's id: this write may have been
	// applied and then overwritten under the same token.
	return false, fmt.Errorf("%w: the mark carries the write's token under another write id", errUnsettled)
}

// maybeSent reports whether a failed request may have reached the server:
// false for error replies (the server answered), a closed client, pool
// timeouts and failed dials (nothing was sent).
func maybeSent(err error) bool {
	var rerr redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &rerr):
		return false
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}
