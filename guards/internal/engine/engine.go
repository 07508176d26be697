package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// DefaultMaxAttempts is the default of every guard's Config.MaxAttempts.
const DefaultMaxAttempts = 8

// Read says how fresh the mark an [Attempt] reads must be.
type Read int

const (
	// ReadAny lets the driver skip reading the mark when its commit
	// decides on the store by itself (Attempt.Mark then reports none), or
	// use a mark it remembers.
	ReadAny Read = iota
	// ReadFresh requires the mark as the store holds it now.
	ReadFresh
)

// Result is the outcome of a commit or a settle.
type Result int

const (
	// Committed means the write was applied.
	Committed Result = iota
	// Failed means the write was not applied, for the reason in the error
	// (a refusal, a store error, an outcome the driver reports itself);
	// the engine returns it.
	Failed
	// Conflict means another write came in between; nothing was applied. The
	// engine reads the mark again, decides again and sends the write
	// again while attempts remain (fence.ErrBusy when none do). A driver
	// that read the new mark to tell its own write from another's decides
	// on it itself (a refusal is Failed) and may answer the next
	// ReadFresh with it. From
	// Settle it means the copy in transit can no longer apply, though it
	// may have before the other write: a later stale refusal is then
	// Overtaken.
	Conflict
	// Lost means the request was sent and its reply lost (the error says what
	// came instead); the engine settles it (Attempt.Settle). Commit only.
	Lost
	// NotApplied means the lost write was not applied and never will be. The
	// engine sends it again under a new write id while attempts remain.
	// Settle only.
	NotApplied
)

// Driver is one store's part of a fenced write.
type Driver interface {
	// Open starts one attempt at writing resource: it reads the mark as
	// read requires (and takes what the store needs held until the
	// commit, such as a lock). Its error ends the call.
	Open(ctx context.Context, resource string, read Read) (Attempt, error)
}

// Attempt is one attempt at a fenced write, from the read of the mark to
// the commit.
type Attempt interface {
	// Mark returns the mark Open read, and ok false when Open read none
	// (the commit decides on the store); cached true when it is a mark
	// the driver remembers rather than one read now.
	Mark() (m fence.Claim, ok, cached bool)
	// Commit sends ch under claim c, admitted on Mark when Mark had one,
	// as one conditional write identified by id.
	Commit(ctx context.Context, c fence.Claim, ch Change, id string) (Result, error)
	// Settle decides the outcome of the write id whose reply was lost
	// (lost: what came instead): Committed, NotApplied, Conflict, or
	// Failed with the error to return (a refusal by a newer mark, with
	// its Overtaken set as the driver knows; an outcome it could not
	// settle, a *fence.OutcomeUnknownError).
	Settle(ctx context.Context, c fence.Claim, ch Change, id string, lost error) (Result, error)
	// Close releases what Open took. It is called once, after the
	// attempt's last Commit or Settle, or instead of them.
	Close()
}

// Engine runs the fenced writes of one guard.
type Engine struct {
	Args
	// Driver is the guard's store.
	Driver Driver
	// Op names a guard's committing request in a *fence.NotAppliedError:
	// "redisguard: write".
	Op string
	// MaxAttempts bounds the conditional writes one call sends, each
	// under a fresh write id; re-sends of one write while settling it do
	// not count. Zero means DefaultMaxAttempts.
	MaxAttempts int
	// Bytes builds the change that fence.Stage stages in a Fence
	// callback, for a guard whose Change.Value is not its staged content
	// (the object-store guards); nil: an OpPut of the value.
	Bytes BytesFunc
}

// NewWriteID returns a random 128-bit write id, hex encoded.
func NewWriteID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Put commits value to resource under the claim ctx carries.
func (e *Engine) Put(ctx context.Context, resource string, value []byte) error {
	return e.context(ctx, resource, Change{Op: OpPut, Value: value})
}

// PutClaim commits value to resource under the claim c.
func (e *Engine) PutClaim(ctx context.Context, resource string, c fence.Claim, value []byte) error {
	return e.explicit(ctx, resource, c, Change{Op: OpPut, Value: value})
}

// Delete removes resource's value (the mark stays) under the claim ctx
// carries.
func (e *Engine) Delete(ctx context.Context, resource string) error {
	return e.context(ctx, resource, Change{Op: OpDelete})
}

// DeleteClaim is Delete under the claim c.
func (e *Engine) DeleteClaim(ctx context.Context, resource string, c fence.Claim) error {
	return e.explicit(ctx, resource, c, Change{Op: OpDelete})
}

// Fence is fence.Guard's Fence: FenceClaim under fence.ClaimFor(ctx,
// token), checked.
func (e *Engine) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	c, err := e.Token(ctx, resource, token)
	if err != nil {
		return err
	}
	return e.FenceClaim(ctx, resource, c, write)
}

// Do is FenceClaim under the claim ctx carries, checked.
func (e *Engine) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	c, err := e.Context(ctx, resource)
	if err != nil {
		return err
	}
	return e.FenceClaim(ctx, resource, c, write)
}

func (e *Engine) context(ctx context.Context, resource string, ch Change) error {
	c, err := e.Context(ctx, resource)
	if err != nil {
		return err
	}
	return e.Write(ctx, resource, c, ch)
}

func (e *Engine) explicit(ctx context.Context, resource string, c fence.Claim, ch Change) error {
	if err := e.Explicit(ctx, resource, c); err != nil {
		return err
	}
	return e.Write(ctx, resource, c, ch)
}

// Write commits ch to resource under c, whose input the caller checked
// (Args.Explicit or Args.Context), in one span.
func (e *Engine) Write(ctx context.Context, resource string, c fence.Claim, ch Change) error {
	ctx, span := e.Rec.Start(ctx, resource, c)
	err := ContextErr(ctx, e.Name, e.loop(ctx, nil, resource, c, ch, NewWriteID()))
	e.Rec.Decision(ctx, err)
	span.End(err)
	return err
}

// FenceClaim is Run on a fresh read of the mark.
func (e *Engine) FenceClaim(ctx context.Context, resource string, c fence.Claim, write func(ctx context.Context) error) error {
	return e.Run(ctx, resource, c, ReadFresh, write)
}

// Run runs write after admitting c (checked by the caller) on a read of
// resource's mark as read allows (with ReadAny, a refusal on a remembered
// mark is decided again on a fresh one), then commits what write staged
// (Stage, Stager) as Write does, deciding again. write runs under the
// call's span with a context that carries c (fence.ClaimFromContext) and
// the call's Stager. A refusal on that first read is recorded as a span
// marked not sent, a failure of that read as a span with its error;
// write's error ends the span and is returned (through ContextErr), and
// nothing is written. Every error Run and Write return passes through
// ContextErr.
func (e *Engine) Run(ctx context.Context, resource string, c fence.Claim, read Read, write func(ctx context.Context) error) error {
	if write == nil {
		return e.NilArgument(resource, "Fence with nil write")
	}
	att, err := e.open(ctx, resource, c, read)
	err = ContextErr(ctx, e.Name, err)
	if _, stale := fence.IsStale(err); stale || isReused(err) {
		e.Rec.Decision(ctx, err)
		e.Rec.Refused(ctx, resource, c, err)
		return err
	}
	if err != nil { // the first read failed: nothing was sent
		_, span := e.Rec.Start(ctx, resource, c)
		span.End(err)
		return err
	}
	ctx, span := e.Rec.Start(ctx, resource, c)
	st := &Stager{Driver: e.Driver, Resource: resource, Claim: c, WriteID: NewWriteID(), Bytes: e.Bytes}
	ch, err := run(ctx, e.Name, st, write)
	if err != nil {
		att.Close()
		err = ContextErr(ctx, e.Name, err)
	} else {
		err = ContextErr(ctx, e.Name, e.loop(ctx, att, resource, c, ch, st.WriteID))
		e.Rec.Decision(ctx, err)
	}
	span.End(err)
	return err
}

// With returns a copy of e over the driver d: a guard whose driver keeps
// state across the attempts of one call (what it committed, what was
// staged) makes a driver per call and runs it with With.
func (e *Engine) With(d Driver) *Engine {
	c := *e
	c.Driver = d
	return &c
}

// loop sends ch until it is committed, refused, settled as unknown, or
// out of attempts. att is an attempt already open and admitted (Fence's),
// or nil; id is the write id of the first conditional write, each later
// one has a fresh one.
func (e *Engine) loop(ctx context.Context, att Attempt, resource string, c fence.Claim, ch Change, id string) error {
	max := e.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	// lost is the error of an earlier request of this call whose reply
	// was lost and which was settled as not applied (nil: none);
	// overtaken says a later stale refusal may follow that request's
	// effect (it was settled by a Conflict).
	var lost error
	overtaken := false
	read := ReadAny
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			e.Rec.Retried(ctx, 1)
			id = NewWriteID()
		}
		res, lostNow, err := e.attempt(ctx, att, resource, c, ch, read, id)
		att = nil
		if lostNow != nil && (res == NotApplied || res == Conflict) {
			lost = lostNow
			overtaken = overtaken || res == Conflict
		}
		switch res {
		case Committed:
			return nil
		case NotApplied:
			if attempt >= max || fence.ContextError(ctx) != nil {
				return e.notApplied(ctx, resource, lost, lost)
			}
			read = ReadAny
		case Conflict:
			if attempt >= max {
				return fence.WrapContext(ctx, fmt.Errorf("%s %q: lost the race in each of %d attempts: %w", e.Op, resource, max, fence.ErrBusy))
			}
			read = ReadFresh
		default:
			return e.failed(ctx, resource, lost, overtaken, err)
		}
	}
}

// failed returns the error that ended a call: a refusal as it is (stale
// marked Overtaken when an earlier request of the call may have been
// applied before the newer mark), anything else through notApplied.
func (e *Engine) failed(ctx context.Context, resource string, lost error, overtaken bool, err error) error {
	if se, ok := fence.IsStale(err); ok {
		se.Overtaken = se.Overtaken || overtaken
		return fence.WrapContext(ctx, err)
	}
	if isReused(err) {
		return fence.WrapContext(ctx, err)
	}
	return e.notApplied(ctx, resource, lost, err)
}

// open opens an attempt at resource and admits c on its mark (when it
// read one). A refusal on a mark the driver remembers is decided again on
// a fresh read.
func (e *Engine) open(ctx context.Context, resource string, c fence.Claim, read Read) (Attempt, error) {
	for {
		att, err := e.Driver.Open(ctx, resource, read)
		if err != nil {
			return nil, err
		}
		m, ok, cached := att.Mark()
		if !ok {
			return att, nil
		}
		err = fence.DecideClaim(resource, c, m.Token, m.Run)
		if err == nil {
			return att, nil
		}
		att.Close()
		if !cached {
			return nil, err
		}
		read = ReadFresh
	}
}

// attempt opens an attempt (unless att is one), decides on its mark,
// commits once under write id id and settles a lost reply. lost is the
// error that came instead of the reply, when one was lost.
func (e *Engine) attempt(ctx context.Context, att Attempt, resource string, c fence.Claim, ch Change, read Read, id string) (res Result, lost, err error) {
	if att == nil {
		if att, err = e.open(ctx, resource, c, read); err != nil {
			return Failed, nil, err
		}
	}
	defer att.Close()
	if err := fence.ContextError(ctx); err != nil {
		return Failed, nil, fmt.Errorf("%s: %q: %w", e.Name, resource, err)
	}
	res, err = att.Commit(ctx, c, ch, id)
	if res != Lost {
		return res, nil, err
	}
	lost = err
	res, err = att.Settle(ctx, c, ch, id, lost)
	return res, lost, err
}

// notApplied returns err, the error that ended a call before it could
// write, as a *fence.NotAppliedError when an earlier request of the call
// had left (lost != nil) and was settled as not applied.
func (e *Engine) notApplied(ctx context.Context, resource string, lost, err error) error {
	if lost == nil {
		return err
	}
	return &fence.NotAppliedError{Op: e.Op, Resource: resource, Err: fence.WrapContext(ctx, err)}
}

func isReused(err error) bool {
	_, ok := fence.IsReused(err)
	return ok
}

// ContextErr is fence.WrapContext, except that an error matching
// fence.ErrBusy once ctx has ended is replaced by the context's error: the
// retries stopped because the context ended, and a retry with the same
// context cannot succeed (docs/guards.md: a call whose context ended never
// reports fence.ErrBusy). prefix starts the replacement's message. A nil
// ctx leaves err as it is.
func ContextErr(ctx context.Context, prefix string, err error) error {
	if err == nil || ctx == nil {
		return err
	}
	cerr := fence.ContextError(ctx)
	if cerr == nil {
		return err
	}
	if errors.Is(err, fence.ErrBusy) {
		return fmt.Errorf("%s: gave up after the context ended (%s): %w", prefix, err.Error(), cerr)
	}
	return fence.WrapContext(ctx, err)
}

// MaxAttemptsConfig checks a guard's Config.MaxAttempts and fills its
// default: a negative *n is refused with a *fence.ConfigError of source
// (the guard's name), zero becomes DefaultMaxAttempts.
func MaxAttemptsConfig(n *int, source string) error {
	switch {
	case *n < 0:
		return &fence.ConfigError{Source: source, Field: "MaxAttempts", Reason: fmt.Sprintf("%d is negative", *n)}
	case *n == 0:
		*n = DefaultMaxAttempts
	}
	return nil
}
