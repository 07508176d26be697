package effects

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencekit/fencekit/effects/effectsobs"
	"github.com/fencekit/fencekit/fence"
)

// Relay defaults.
const (
	DefaultClaimFor = 30 * time.Second
	DefaultPoll     = time.Second
	DefaultBatch    = 16
	DefaultRetryMin = time.Second
	DefaultRetryMax = 5 * time.Minute
)

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Name identifies the relay in claimed_by. Default: a random name.
	Name string
	// Targets limits the relay to these target names; empty: every target
	// of the Outbox that has a Deliverer.
	Targets []string
	// ClaimFor is a claim's lease (visibility timeout): each attempt must
	// end within it (its context ends a tenth of it early), and another
	// relay may claim the effect again once it passed. Default
	// DefaultClaimFor; at least 100ms.
	ClaimFor time.Duration
	// Poll is how often the relay looks for due effects when no
	// notification arrived (retries come due, notifications may be lost).
	// Default DefaultPoll.
	Poll time.Duration
	// Batch is how many effects one claim statement takes (delivered
	// concurrently). Default DefaultBatch.
	Batch int
	// RetryMin and RetryMax bound the backoff between attempts of an
	// effect: RetryMin·2^(attempt-1), at most RetryMax, with full jitter
	// over its upper half; a target's Retry-After raises it (up to
	// RetryMax). Defaults DefaultRetryMin, DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// ListenConnString is the connection string of the relay's LISTEN
	// connection, when the Outbox's pool goes through a transaction
	// pooler (which cannot deliver notifications). Default: the pool's
	// settings.
	ListenConnString string
}

// RelayStats counts what a Relay did since it was built.
type RelayStats struct {
	Claimed    int64 // claims (attempts started)
	Delivered  int64
	Rejected   int64
	Ambiguous  int64
	Retried    int64 // attempts that ended in a retry
	Superseded int64 // outcomes not written because another claim took over
}

// Relay claims due effects and delivers them. Any number of relays, in any
// number of processes, may run on one schema: a claim takes rows with FOR
// UPDATE SKIP LOCKED, raises their epoch and holds them for ClaimFor; an
// outcome is written only under the epoch of its claim.
type Relay struct {
	o       *Outbox
	cfg     RelayConfig
	names   []string
	amo     []string
	hooks   relayHooks
	mu      sync.Mutex
	started bool
	stopped bool
	gauge   metric.Registration // the OldestPending callback while started
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}
	stats   struct{ claimed, delivered, rejected, ambiguous, retried, superseded atomic.Int64 }
}

// relayHooks are test hooks (export_test.go); nil in production.
type relayHooks struct {
	// afterClaim runs after a claim committed, before the attempt.
	afterClaim func(id uuid.UUID, epoch int64)
	// afterSend runs after the Deliverer returned; true abandons the
	// attempt without writing its outcome (a relay that died there).
	afterSend func(id uuid.UUID, epoch int64) bool
}

// NewRelay validates cfg and returns a stopped Relay for o. It does no I/O.
func NewRelay(o *Outbox, cfg RelayConfig) (*Relay, error) {
	if o == nil {
		return nil, &fence.ConfigError{Source: "effects", Field: "Outbox", Reason: "nil"}
	}
	r := &Relay{o: o, cfg: cfg, wake: make(chan struct{}, 1)}
	if r.cfg.Name == "" {
		r.cfg.Name = "relay-" + uuid.NewString()[:8]
	}
	if len(r.cfg.Name) > 128 {
		return nil, &fence.ConfigError{Source: "effects", Field: "Name", Reason: "longer than 128 bytes"}
	}
	names := cfg.Targets
	if len(names) == 0 {
		for n, t := range o.targets {
			if t.Deliverer != nil {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		t, ok := o.targets[n]
		if !ok {
			return nil, &fence.ConfigError{Source: "effects", Field: "Targets", Reason: fmt.Sprintf("%q is not a target of the Outbox", n)}
		}
		if t.Deliverer == nil {
			return nil, &fence.ConfigError{Source: "effects", Field: "Targets", Reason: fmt.Sprintf("target %q has no Deliverer", n)}
		}
		r.names = append(r.names, n)
		if t.AtMostOnce {
			r.amo = append(r.amo, n)
		}
	}
	if len(r.names) == 0 {
		return nil, &fence.ConfigError{Source: "effects", Field: "Targets", Reason: "no target with a Deliverer"}
	}
	if r.amo == nil {
		r.amo = []string{}
	}
	def := func(d *time.Duration, v time.Duration, field string, min time.Duration) error {
		if *d == 0 {
			*d = v
		}
		if *d < min {
			return &fence.ConfigError{Source: "effects", Field: field, Reason: fmt.Sprintf("%s is below %s", *d, min)}
		}
		return nil
	}
	for _, f := range []error{
		def(&r.cfg.ClaimFor, DefaultClaimFor, "ClaimFor", 100*time.Millisecond),
		def(&r.cfg.Poll, DefaultPoll, "Poll", time.Millisecond),
		def(&r.cfg.RetryMin, DefaultRetryMin, "RetryMin", time.Millisecond),
		def(&r.cfg.RetryMax, DefaultRetryMax, "RetryMax", time.Millisecond),
	} {
		if f != nil {
			return nil, f
		}
	}
	if r.cfg.RetryMax < r.cfg.RetryMin {
		return nil, &fence.ConfigError{Source: "effects", Field: "RetryMax", Reason: "below RetryMin"}
	}
	switch {
	case r.cfg.Batch == 0:
		r.cfg.Batch = DefaultBatch
	case r.cfg.Batch < 0 || r.cfg.Batch > 1000:
		return nil, &fence.ConfigError{Source: "effects", Field: "Batch", Reason: fmt.Sprintf("%d not in 1..1000", r.cfg.Batch)}
	}
	if r.cfg.ListenConnString != "" {
		if _, err := pgx.ParseConfig(r.cfg.ListenConnString); err != nil {
			return nil, &fence.ConfigError{Source: "effects", Field: "ListenConnString", Reason: err.Error(), Err: err}
		}
	}
	return r, nil
}

// Start starts the relay's goroutines (a LISTEN connection and the
// delivery loop) and returns at once. A second Start is a no-op; Start
// after Stop returns ErrStopped. ctx's values are kept; its cancellation
// does not stop the relay (Stop does).
func (r *Relay) Start(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("effects: Relay.Start with nil ctx: %w", fence.ErrNilArgument)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped:
		return ErrStopped
	case r.started:
		return nil
	}
	r.started = true
	if reg, err := r.o.obs.registerOldest(r.o); err != nil {
		r.o.log.Warn("effects: relay: oldest-pending gauge not registered", "relay", r.cfg.Name, "err", err)
	} else {
		r.gauge = reg
	}
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.listen(ctx) }()
	go func() { defer wg.Done(); r.loop(ctx) }()
	go func() { wg.Wait(); close(r.done) }()
	return nil
}

// Stop stops the relay and waits for its goroutines: attempts in flight
// are cancelled (their outcome is written as a retry, or left to the next
// claim when the database cannot be reached). Idempotent; safe before
// Start.
func (r *Relay) Stop() error {
	r.mu.Lock()
	r.stopped = true
	cancel, done, gauge := r.cancel, r.done, r.gauge
	r.gauge = nil
	r.mu.Unlock()
	if gauge != nil {
		_ = gauge.Unregister()
	}
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	return nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Claimed: r.stats.claimed.Load(), Delivered: r.stats.delivered.Load(), Rejected: r.stats.rejected.Load(),
		Ambiguous: r.stats.ambiguous.Load(), Retried: r.stats.retried.Load(), Superseded: r.stats.superseded.Load(),
	}
}

func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// listen keeps a LISTEN connection on the schema's channel and pokes the
// loop on every notification (and on each (re)connect, to catch up).
func (r *Relay) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.o.log.Warn("effects: relay listener", "relay", r.cfg.Name, "err", err)
		select { // the poll covers the gap
		case <-ctx.Done():
		case <-time.After(r.cfg.Poll):
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context) error {
	var cc *pgx.ConnConfig
	if r.cfg.ListenConnString != "" {
		c, err := pgx.ParseConfig(r.cfg.ListenConnString)
		if err != nil {
			return err
		}
		cc = c
	} else {
		cc = r.o.pool.Config().ConnConfig.Copy()
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.o.channel}.Sanitize()); err != nil {
		return err
	}
	r.poke()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		r.poke()
	}
}

func (r *Relay) loop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
		for ctx.Err() == nil {
			n, err := r.pass(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.o.log.Warn("effects: relay claim", "relay", r.cfg.Name, "err", err)
				}
				break
			}
			if n < r.cfg.Batch {
				break
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(r.cfg.Poll)
	}
}

// claimed is one claimed effect.
type claimed struct {
	id        uuid.UUID
	epoch     int64
	target    string
	request   []byte
	attempts  int
	firstSent time.Time
	oldState  string
	now       time.Time
	started   time.Time // local monotonic time the claim was sent
	created   time.Time // the effect's record (database clock)
	// traceparent is the record span's W3C traceparent; nil when the
	// record was not traced.
	traceparent *string
}

// pass claims one batch and delivers it; it returns how many it claimed.
func (r *Relay) pass(ctx context.Context) (int, error) {
	started := time.Now()
	rows, err := r.o.pool.Query(ctx, r.o.st.claim, r.names, r.cfg.Batch, r.cfg.Name, r.cfg.ClaimFor.Microseconds(), r.amo)
	if err != nil {
		return 0, err
	}
	var batch []claimed
	for rows.Next() {
		var (
			c  claimed
			id string
		)
		if err := rows.Scan(&id, &c.epoch, &c.target, &c.request, &c.attempts, &c.firstSent, &c.oldState, &c.now, &c.created, &c.traceparent); err != nil {
			rows.Close()
			return 0, err
		}
		if c.id, err = uuid.Parse(id); err != nil {
			rows.Close()
			return 0, err
		}
		c.started = started
		batch = append(batch, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	r.stats.claimed.Add(int64(len(batch)))
	w := r.startWriter(ctx)
	var wg sync.WaitGroup
	for _, c := range batch {
		wg.Add(1)
		go func() { defer wg.Done(); r.attempt(ctx, w, c) }()
	}
	wg.Wait()
	w.close()
	return len(batch), nil
}

// attempt delivers one claimed effect and writes its outcome under the
// claim's epoch, through w (nil: a statement of its own).
func (r *Relay) attempt(ctx context.Context, w *outcomeWriter, c claimed) {
	ctx, end := r.o.obs.startAttempt(ctx, r.cfg.Name, c)
	defer end()
	if h := r.hooks.afterClaim; h != nil {
		h(c.id, c.epoch)
	}
	t := r.o.targets[c.target]
	if c.oldState == string(StateSending) {
		r.finish(ctx, w, c, StateAmbiguous, Result{Detail: "an earlier at-most-once send was interrupted (its relay stopped or its claim expired while sending): it may have been sent; not resent"}, nil)
		return
	}
	deadline := c.started.Add(r.cfg.ClaimFor - r.cfg.ClaimFor/10)
	if !t.AtMostOnce {
		windowEnd := c.firstSent.Add(t.DedupWindow)
		if !c.now.Before(windowEnd) {
			r.finish(ctx, w, c, StateAmbiguous, Result{Detail: fmt.Sprintf("the target's dedup window (%s) passed with the outcome unknown: not resent", t.DedupWindow)}, nil)
			return
		}
		// The send must reach the target inside its window (on the
		// database clock, measured from the claim).
		if local := c.started.Add(windowEnd.Sub(c.now)); local.Before(deadline) {
			deadline = local
		}
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	res, err := t.Deliverer.Deliver(dctx, Delivery{ID: c.id, Target: c.target, Key: IdempotencyKey(c.id), Request: c.request, Attempt: c.attempts})
	cancel()
	if h := r.hooks.afterSend; h != nil && h(c.id, c.epoch) {
		return // a relay that died here: the claim expires, another attempt follows
	}
	var rej *RejectedError
	switch {
	case err == nil:
		r.finish(ctx, w, c, StateDelivered, res, nil)
	case errors.As(err, &rej):
		r.finish(ctx, w, c, StateRejected, Result{Code: rej.Code, Detail: rej.Detail}, err)
	case t.AtMostOnce && !isNotSent(err):
		r.finish(ctx, w, c, StateAmbiguous, Result{Code: res.Code, Detail: "at-most-once send failed with the outcome unknown: not resent"}, err)
	default:
		r.retry(ctx, w, c, err)
	}
}

// writeCtx bounds an outcome write; it survives Stop's cancellation so
// that an attempt that ended is recorded.
func writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// outcome is what one attempt writes under its claim's epoch: a final
// state with its result, or (state pending) a retry due after delay.
type outcome struct {
	c     claimed
	state State
	res   Result
	cause error
	delay time.Duration
}

// writeOutcomes writes outs in one statement (the outcomes statement) and
// returns, per outcome, nil when it was written, pgx.ErrNoRows when its
// claim's epoch is no longer the effect's (superseded: nothing written),
// or the statement's error. A statement the server refused (a deadlock
// between the rows of two writers, say) wrote nothing: each outcome is
// then written on its own.
func (r *Relay) writeOutcomes(ctx context.Context, outs []outcome) []error {
	errs := make([]error, len(outs))
	n := len(outs)
	var (
		ids      = make([]string, n)
		epochs   = make([]int64, n)
		states   = make([]string, n)
		codes    = make([]int64, n)
		details  = make([]string, n)
		errTexts = make([]*string, n)
		delays   = make([]int64, n)
	)
	for i, o := range outs {
		ids[i], epochs[i], states[i] = o.c.id.String(), o.c.epoch, string(o.state)
		codes[i], details[i], delays[i] = int64(o.res.Code), shorten(o.res.Detail), o.delay.Microseconds()
		if o.cause != nil {
			s := shorten(o.cause.Error())
			errTexts[i] = &s
		}
	}
	wctx, cancel := writeCtx(ctx)
	defer cancel()
	written := make(map[string]bool, n)
	var (
		rows pgx.Rows
		err  error
	)
	if n == 1 {
		rows, err = r.o.pool.Query(wctx, r.o.st.outcome, ids[0], epochs[0], states[0], codes[0], details[0], errTexts[0], delays[0], r.o.outcomes)
	} else {
		rows, err = r.o.pool.Query(wctx, r.o.st.outcomes, ids, epochs, states, codes, details, errTexts, delays, r.o.outcomes)
	}
	if err == nil {
		for rows.Next() {
			var (
				id string
				ok bool
			)
			if err = rows.Scan(&id, &ok); err != nil {
				break
			}
			written[id] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	var pe *pgconn.PgError
	if err != nil && n > 1 && errors.As(err, &pe) {
		for i := range outs {
			errs[i] = r.writeOutcomes(ctx, outs[i:i+1])[0]
		}
		return errs
	}
	for i := range outs {
		switch {
		case err != nil:
			errs[i] = err
		case !written[ids[i]]:
			errs[i] = pgx.ErrNoRows
		}
	}
	return errs
}

// outcomeWriter writes the outcomes of one pass's attempts, as they end,
// in as few statements as they allow: an outcome that ends while no write
// is in flight is written at once, and those that end while one is in
// flight go together in the next statement (a group commit).
type outcomeWriter struct {
	r    *Relay
	ctx  context.Context
	in   chan outcomeReq
	done chan struct{}
}

type outcomeReq struct {
	o     outcome
	reply chan error
}

// startWriter starts a pass's outcome writer; close stops it.
func (r *Relay) startWriter(ctx context.Context) *outcomeWriter {
	w := &outcomeWriter{r: r, ctx: ctx, in: make(chan outcomeReq, r.cfg.Batch), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *outcomeWriter) run() {
	defer close(w.done)
	for req := range w.in {
		reqs := []outcomeReq{req}
	more:
		for {
			select {
			case q, ok := <-w.in:
				if !ok {
					break more
				}
				reqs = append(reqs, q)
			default:
				break more
			}
		}
		outs := make([]outcome, len(reqs))
		for i, q := range reqs {
			outs[i] = q.o
		}
		for i, err := range w.r.writeOutcomes(w.ctx, outs) {
			reqs[i].reply <- err
		}
	}
}

// close stops the writer once every attempt of the pass has its reply.
func (w *outcomeWriter) close() {
	close(w.in)
	<-w.done
}

// write writes o, through w when there is one, and returns what
// writeOutcomes says of it.
func (r *Relay) write(ctx context.Context, w *outcomeWriter, o outcome) error {
	if w == nil {
		return r.writeOutcomes(ctx, []outcome{o})[0]
	}
	reply := make(chan error, 1)
	w.in <- outcomeReq{o: o, reply: reply}
	return <-reply
}

func (r *Relay) finish(ctx context.Context, w *outcomeWriter, c claimed, st State, res Result, cause error) {
	err := r.write(ctx, w, outcome{c: c, state: st, res: res, cause: cause})
	r.o.obs.attemptOutcome(ctx, c, string(st), err == nil, ignoreNoRows(err))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.stats.superseded.Add(1)
		r.o.log.Warn("effects: outcome not written: another claim took the effect over", "relay", r.cfg.Name, "effect", c.id, "epoch", c.epoch, "state", st)
	case err != nil:
		r.o.log.Warn("effects: outcome write failed; the next claim decides", "relay", r.cfg.Name, "effect", c.id, "err", err)
	default:
		switch st {
		case StateDelivered:
			r.stats.delivered.Add(1)
		case StateRejected:
			r.stats.rejected.Add(1)
		case StateAmbiguous:
			r.stats.ambiguous.Add(1)
		}
	}
}

func (r *Relay) retry(ctx context.Context, w *outcomeWriter, c claimed, cause error) {
	d := r.backoff(c.attempts)
	var ra *RetryAfterError
	if errors.As(cause, &ra) && ra.After > d {
		d = min(ra.After, r.cfg.RetryMax)
	}
	err := r.write(ctx, w, outcome{c: c, state: StatePending, cause: cause, delay: d})
	r.o.obs.attemptOutcome(ctx, c, effectsobs.OutcomeRetry, err == nil, ignoreNoRows(err))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.stats.superseded.Add(1)
	case err != nil:
		r.o.log.Warn("effects: retry write failed; the claim expires instead", "relay", r.cfg.Name, "effect", c.id, "err", err)
	default:
		r.stats.retried.Add(1)
	}
}

// backoff is RetryMin·2^(attempts-1) capped at RetryMax, jittered over
// its upper half.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.cfg.RetryMin
	for i := 1; i < attempts && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, r.cfg.RetryMax)
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}
