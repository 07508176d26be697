package lease

import "context"

// Acquire takes the lease for key if it is free (never acquired, released or
// expired on the database clock), in one statement. Before that, the
// Authorizer runs; a refusal returns an error matching ErrUnauthorized and
// sends nothing. A held lease returns a *HeldError (matching ErrHeld). The
// returned Lease is renewed in the background until it is released, lost,
// or the Manager is closed.
//
// ctx bounds the call only. The lease's Context keeps ctx's values (user
// id, trace span, logger) but not its cancellation or deadline
// (context.WithoutCancel): the lease lives until it is released or lost.
// Use Run to tie the work to a caller's ctx. WithHolder labels the grant.
//
// A grant refused by the token floor or node gate (ErrFailoverUnchecked
// after a failover, switchover or restore; ErrTokenFloor) is followed,
// when Config.Floor names a source, by the Manager's own floor check and
// one more acquire statement: the call grants if the check passed. A
// failed check returns the refusal also matching ErrFloorCheck.
func (m *Manager) Acquire(ctx context.Context, key Key, opts ...Option) (l *Lease, err error) {
	ctx, sp := m.startSpan(ctx, spanAcquire, key)
	defer func() { sp.endGrant(l, err) }()
	o, err := m.admit(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return m.grant(ctx, grantAcquire, key, o)
}

// admit is what every grant (Acquire, Takeover, Resume) checks before it
// sends anything, in this order: the key, the options, the Manager still
// open, and the Authorizer's answer. AcquireWait checks the first three the
// same way and asks the Authorizer before each attempt.
func (m *Manager) admit(ctx context.Context, key Key, opts []Option) (grantOptions, error) {
	if err := key.Validate(); err != nil {
		return grantOptions{}, err
	}
	o, err := grantOpts(opts)
	if err != nil {
		return o, err
	}
	if m.isClosed() {
		return o, ErrClosed
	}
	return o, m.authorize(ctx, key)
}
