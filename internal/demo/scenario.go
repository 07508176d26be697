package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Scenario defaults.
const (
	DefaultTTL     = time.Second
	DefaultAccount = "acme"
	// User is the person behind the desktop and browser clients; Intruder
	// is signed in but belongs to another account.
	User     = "ana"
	Intruder = "mallory"
)

// ScenarioConfig configures RunScenario. Zero fields take the defaults.
type ScenarioConfig struct {
	Conn Conn
	// TTL of every lease in the scenario (default DefaultTTL). Run A stalls
	// for at least 1.25×TTL.
	TTL time.Duration
	// Account and Session name the conversation; Session defaults to a
	// fresh "conv-<random>" so that runs never meet each other's state.
	Account, Session string
	// Sink receives every event as it happens (printing, JSON).
	Sink func(Event)

	// beforeEnd, when set (tests only), runs just before the end-state
	// checks, with a direct pool and the quoted table name.
	beforeEnd func(ctx context.Context, pool *pgxpool.Pool, table string, res *Result) error
}

// Check is one end-state or outcome check of the scenario.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// Result is what a scenario run produced. It is returned also when checks
// failed (with a *CheckError).
type Result struct {
	Key            lease.Key
	TTL            time.Duration // the leases' TTL
	RunA, RunB     uuid.UUID
	TokenA, TokenB fence.Token
	S3Key          string // the report object
	PGResource     string // the guarded PostgreSQL resource
	Events         []Event
	Checks         []Check
}

// NotMemberError is the demo Authorizer's refusal: the signed-in user is not
// a member of the account whose session they asked for.
type NotMemberError struct {
	User, Account string
}

func (e *NotMemberError) Error() string {
	return fmt.Sprintf("user %q is not a member of account %q", e.User, e.Account)
}

// member is the demo's lease.Authorizer: a user and the accounts they belong
// to. It records every decision as an event.
type member struct {
	rec      *Recorder
	actor    Actor
	user     string
	accounts []string
}

func (m member) Authorize(_ context.Context, key lease.Key) error {
	for _, a := range m.accounts {
		if a == key.AccountID {
			m.rec.Emit(Event{Actor: m.actor, Kind: KindAuthorize, Outcome: OK,
				Detail: fmt.Sprintf("%s is a member of %q: may compete for the session", m.user, key.AccountID)})
			return nil
		}
	}
	err := &NotMemberError{User: m.user, Account: key.AccountID}
	m.rec.Emit(Event{Actor: m.actor, Kind: KindAuthorize, Outcome: Unauthorized, Cause: err.Error(),
		Detail: "refused before any statement: " + err.Error()})
	return err
}

type scenario struct {
	cfg    ScenarioConfig
	rec    *Recorder
	key    lease.Key
	s3Key  string
	pgRes  string
	table  string // quoted schema.table
	qSeq   string // quoted schema.sequence
	bucket string

	pgProxy, s3Proxy    *netproxy.Proxy
	poolA, poolB, poolC *pgxpool.Pool
	mgrA, mgrB          *lease.Manager
	mgrRetry, mgrIntr   *lease.Manager
	storeA, storeB      *s3guard.Store
	guard               *pgguard.Guard // FenceTx inside the writers' own transactions
	marks               *pgguard.Guard // reads marks for the checks

	checks []Check
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RunScenario runs the two-devices scenario against the real services and
// checks its outcome. The error is a *CheckError when the run completed but a
// check failed, a *ServiceError when a service is unreachable, a
// *UsageError for bad configuration, or the error of the step that could not
// proceed.
func RunScenario(ctx context.Context, cfg ScenarioConfig) (*Result, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < lease.MinTTL || cfg.TTL > time.Minute {
		return nil, usagef("--ttl %v: want %v to 1m", cfg.TTL, lease.MinTTL)
	}
	if cfg.Account == "" {
		cfg.Account = DefaultAccount
	}
	if cfg.Session == "" {
		cfg.Session = "conv-" + randomHex(4)
	}
	if err := cfg.Conn.validate(); err != nil {
		return nil, err
	}
	key := lease.Key{AccountID: cfg.Account, SessionID: cfg.Session}
	if err := key.Validate(); err != nil {
		return nil, usagef("session key: %v", err)
	}
	s := &scenario{cfg: cfg, key: key, bucket: cfg.Conn.Bucket,
		s3Key: "reports/" + cfg.Account + "/" + cfg.Session + ".txt",
		pgRes: "report/" + cfg.Account + "/" + cfg.Session,
	}
	q, _ := migrations.QuoteIdentifier(cfg.Conn.Schema)
	s.table, s.qSeq = q+"."+ReportsTable, q+".fencekit_token_seq"

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+20*cfg.TTL)
	defer cancel()
	if err := s.setup(ctx); err != nil {
		s.teardown() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
		return nil, err
	}
	defer s.teardown() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
	s.rec = NewRecorder(cfg.Sink)
	res, err := s.run(ctx)
	res.Events = s.rec.Events()
	res.Checks = s.checks
	return res, err
}

func (s *scenario) setup(ctx context.Context) (err error) {
	c := s.cfg.Conn
	target, err := pgTarget(c.DatabaseURL)
	if err != nil {
		return err
	}
	if s.poolB, err = openPool(ctx, c.DatabaseURL, ""); err != nil {
		return err
	}
	clB, err := newMinIO(c, c.MinIOEndpoint)
	if err != nil {
		return err
	}
	if err := prepare(ctx, s.poolB, clB, c); err != nil {
		return err
	}
	// Run A reaches both stores through proxies the scenario can blackhole.
	if s.pgProxy, err = netproxy.New(target); err != nil { //nolint:contextcheck // the proxy lives until teardown
		return err
	}
	if s.s3Proxy, err = netproxy.New(c.MinIOEndpoint); err != nil { //nolint:contextcheck // the proxy lives until teardown
		return err
	}
	if s.poolA, err = openPool(ctx, c.DatabaseURL, s.pgProxy.Addr()); err != nil {
		return err
	}
	if s.poolC, err = openPool(ctx, c.DatabaseURL, ""); err != nil {
		return err
	}
	clA, err := newMinIO(c, s.s3Proxy.Addr())
	if err != nil {
		return err
	}
	if s.storeA, err = s3guard.New(s3guard.Config{Client: minioclient.New(clA), Bucket: c.Bucket}); err != nil {
		return err
	}
	if s.storeB, err = s3guard.New(s3guard.Config{Client: minioclient.New(clB), Bucket: c.Bucket}); err != nil {
		return err
	}
	if s.guard, err = pgguard.New(pgguard.Config{Schema: c.Schema}); err != nil {
		return err
	}
	if s.marks, err = pgguard.New(pgguard.Config{DB: s.poolB, Schema: c.Schema}); err != nil {
		return err
	}
	return nil
}

// managers are built once the Recorder exists (their Authorizers record).
func (s *scenario) managers() (err error) {
	mk := func(pool *pgxpool.Pool, a Actor, user string, accounts ...string) (*lease.Manager, error) {
		return lease.New(lease.Config{
			Pool: pool, Schema: s.cfg.Conn.Schema, TTL: s.cfg.TTL,
			CallTimeout: max(s.cfg.TTL, 500*time.Millisecond),
			Authorizer:  member{rec: s.rec, actor: a, user: user, accounts: accounts},
		})
	}
	if s.mgrA, err = mk(s.poolA, ActorA, User, s.key.AccountID); err != nil {
		return err
	}
	if s.mgrB, err = mk(s.poolB, ActorB, User, s.key.AccountID); err != nil {
		return err
	}
	if s.mgrRetry, err = mk(s.poolC, ActorRetry, User, s.key.AccountID); err != nil {
		return err
	}
	s.mgrIntr, err = mk(s.poolC, ActorIntrude, Intruder, "globex")
	return err
}

func (s *scenario) teardown() {
	for _, p := range []*netproxy.Proxy{s.pgProxy, s.s3Proxy} {
		if p != nil {
			p.Restore()
		}
	}
	for _, m := range []*lease.Manager{s.mgrA, s.mgrB, s.mgrRetry, s.mgrIntr} {
		if m != nil {
			_ = m.Close()
		}
	}
	for _, p := range []*pgxpool.Pool{s.poolA, s.poolB, s.poolC} {
		if p != nil {
			p.Close()
		}
	}
	for _, p := range []*netproxy.Proxy{s.pgProxy, s.s3Proxy} {
		if p != nil {
			_ = p.Close()
		}
	}
}

func (s *scenario) check(name string, ok bool, format string, args ...any) {
	c := Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)}
	s.checks = append(s.checks, c)
	out := OK
	if !ok {
		out = Failed
	}
	s.rec.Emit(Event{Actor: ActorCheck, Kind: KindCheck, Outcome: out, Resource: name, Detail: name + ": " + c.Detail})
}

func short(id uuid.UUID) string { return id.String()[:8] }

func short8(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func (s *scenario) body(a Actor, run uuid.UUID, t fence.Token) string {
	return fmt.Sprintf("report for %s written by %s run %s with token %d\n", s.key, a, run, t)
}

// writeS3 stores the report object through s3guard.
func (s *scenario) writeS3(ctx context.Context, st *s3guard.Store, a Actor, run uuid.UUID, t fence.Token) Event {
	info, err := st.PutBytesWithToken(ctx, s.s3Key, t, []byte(s.body(a, run, t)), s3guard.PutOptions{
		ContentType: "text/plain",
		Metadata:    map[string]string{"writer": string(a), "run_id": run.String()},
	})
	e := Event{Actor: a, Kind: KindWrite, Token: int64(t), RunID: run.String(), Store: "s3", Resource: s.s3Key}
	if err != nil {
		return writeErr(e, err)
	}
	e.Outcome = OK
	e.Detail = fmt.Sprintf("s3guard accepted s3://%s/%s (mark now %d)", s.bucket, s.s3Key, info.Token)
	return e
}

// writePG inserts the report row in the writer's own transaction, fenced by
// pgguard.FenceTx in that same transaction.
func (s *scenario) writePG(ctx context.Context, pool *pgxpool.Pool, a Actor, run uuid.UUID, t fence.Token) Event {
	e := Event{Actor: a, Kind: KindWrite, Token: int64(t), RunID: run.String(), Store: "pg", Resource: s.pgRes}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := s.guard.FenceTxClaim(ctx, tx, s.pgRes, fence.ClaimFor(ctx, t)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (resource, token, run_id, writer, body) VALUES ($1, $2, $3, $4, $5)`,
			s.pgRes, int64(t), run, string(a), s.body(a, run, t))
		return err
	})
	if err != nil {
		return writeErr(e, err)
	}
	e.Outcome = OK
	e.Detail = fmt.Sprintf("pgguard accepted %q: row inserted and mark raised in one transaction", s.pgRes)
	return e
}

func writeErr(e Event, err error) Event {
	e.Cause = err.Error()
	if se, ok := fence.IsStale(err); ok {
		e.Outcome, e.Presented, e.Highest = Stale, int64(se.Presented), int64(se.Highest)
		e.Detail = fmt.Sprintf("%s guard refused %q: stale token %d, resource has accepted %d; nothing written", e.Store, e.Resource, se.Presented, se.Highest)
		return e
	}
	e.Outcome = Failed
	e.Detail = fmt.Sprintf("%s write failed: %v", e.Store, err)
	return e
}

func (s *scenario) seq(ctx context.Context) (int64, error) {
	var v int64
	err := s.poolC.QueryRow(ctx, `SELECT last_value FROM `+s.qSeq).Scan(&v)
	return v, err
}

func (s *scenario) run(ctx context.Context) (*Result, error) {
	res := &Result{Key: s.key, TTL: s.cfg.TTL, S3Key: s.s3Key, PGResource: s.pgRes}
	if err := s.managers(); err != nil {
		return res, err
	}
	rec, ttl := s.rec, s.cfg.TTL
	rec.Emit(Event{Actor: ActorDemo, Kind: KindInfo, Outcome: Note, Detail: fmt.Sprintf(
		"desktop and browser open conversation %s (TTL %v); run A reaches PostgreSQL via %s and MinIO via %s (fault proxies)",
		s.key, ttl, s.pgProxy.Addr(), s.s3Proxy.Addr())})

	// 1. Run A authorises and acquires.
	la, err := s.mgrA.Acquire(ctx, s.key)
	if err != nil {
		return res, fmt.Errorf("run A: acquire: %w", err)
	}
	res.RunA, res.TokenA = la.RunID(), la.Token()
	ta := la.Token()
	rec.Emit(Event{Actor: ActorA, Kind: KindAcquire, Outcome: OK, Token: int64(ta), RunID: la.RunID().String(),
		Until:  rec.Since(la.TrustDeadline()),
		Detail: fmt.Sprintf("lease granted to run %s, trusted for %v (TTL − safety margin)", short(la.RunID()), s.mgrA.TrustWindow())})
	rec.Emit(Event{Actor: ActorA, Kind: KindWork, Outcome: Note, Token: int64(ta), RunID: la.RunID().String(),
		Detail: fmt.Sprintf("tool call write_report starts: s3://%s/%s and a row in %s", s.bucket, s.s3Key, s.table)})
	if _, err := la.Renew(ctx); err != nil {
		return res, fmt.Errorf("run A: renew: %w", err)
	}
	rec.Emit(Event{Actor: ActorA, Kind: KindRenew, Outcome: OK, Token: int64(ta), RunID: la.RunID().String(),
		Until: rec.Since(la.TrustDeadline()), Detail: "heartbeat: trust deadline moved forward (the background renewer keeps doing this)"})

	// 2. The network between run A and both stores stalls, with A's writes
	// on the wire. They use a context that is not the lease's: a request
	// that has left cannot be recalled by cancelling a context.
	stallAt := time.Now()
	s.pgProxy.Blackhole()
	s.s3Proxy.Blackhole()
	rec.Emit(Event{Actor: ActorNet, Kind: KindStall, Outcome: Note,
		Detail: "desktop ⇄ PostgreSQL and MinIO blackholed (a network stall / long GC pause): nothing gets through, nothing errors"})
	inflight := fence.WithToken(ctx, ta)
	var wg sync.WaitGroup
	aS3, aPG := make(chan Event, 1), make(chan Event, 1)
	wctx, wcancel := context.WithCancel(inflight)
	defer func() { wcancel(); s.pgProxy.Restore(); s.s3Proxy.Restore(); wg.Wait() }()
	rec.Emit(Event{Actor: ActorA, Kind: KindWriteSent, Outcome: Pending, Token: int64(ta), RunID: la.RunID().String(), Store: "s3", Resource: s.s3Key,
		Detail: "sends its report to MinIO through s3guard (no reply yet)"})
	rec.Emit(Event{Actor: ActorA, Kind: KindWriteSent, Outcome: Pending, Token: int64(ta), RunID: la.RunID().String(), Store: "pg", Resource: s.pgRes,
		Detail: "sends its row to PostgreSQL: BEGIN; FenceTx; INSERT; COMMIT (no reply yet)"})
	wg.Add(2)
	go func() { defer wg.Done(); aS3 <- rec.Emit(s.writeS3(wctx, s.storeA, ActorA, la.RunID(), ta)) }()
	go func() { defer wg.Done(); aPG <- rec.Emit(s.writePG(wctx, s.poolA, ActorA, la.RunID(), ta)) }()

	// 3. A's renewals get no reply; its context ends at its trust deadline.
	select {
	case <-la.Done():
	case <-ctx.Done():
		return res, fmt.Errorf("run A's lease never ended: %w", ctx.Err())
	}
	cause := context.Cause(la.Context()) //nolint:contextcheck // reading why A's lease context ended
	endEv := rec.Emit(Event{Actor: ActorA, Kind: KindLeaseEnd, Outcome: Lost, Token: int64(ta), RunID: la.RunID().String(), Cause: cause.Error(),
		Until:  rec.Since(la.TrustDeadline()),
		Detail: fmt.Sprintf("lease context cancelled: %v (the tool call is told to stop; its writes are already on the wire)", cause)})
	s.check("A's context ended by its trust deadline", errors.Is(cause, lease.ErrTrustExpired) && endEv.At >= endEv.Until,
		"cause %q at %+.3fs, trust deadline %+.3fs", cause, endEv.At.Seconds(), endEv.Until.Seconds())

	// 4. The browser's run B finds the lease going stale and takes over.
	st, err := s.mgrB.Inspect(ctx, s.key)
	if err != nil {
		return res, fmt.Errorf("run B: inspect: %w", err)
	}
	ie := Event{Actor: ActorB, Kind: KindInspect, Outcome: Note, Token: int64(st.Token), RunID: st.RunID.String(), Status: st.State.String()}
	if st.Held() {
		ie.Until = rec.Since(time.Now().Add(st.Remaining))
		ie.Detail = fmt.Sprintf("server: held by run %s for %v more on the database clock, but no longer renewed", short(st.RunID), st.Remaining.Round(time.Millisecond))
	} else {
		ie.Detail = fmt.Sprintf("server: %s (last run %s)", st.State, short(st.RunID))
	}
	rec.Emit(ie)
	lb, err := s.takeOver(ctx, st)
	if err != nil {
		return res, fmt.Errorf("run B: acquire: %w", err)
	}
	tb := lb.Token()
	res.RunB, res.TokenB = lb.RunID(), tb
	rec.Emit(Event{Actor: ActorB, Kind: KindAcquire, Outcome: OK, Token: int64(tb), RunID: lb.RunID().String(),
		Until:  rec.Since(lb.TrustDeadline()),
		Detail: fmt.Sprintf("took over as run %s (token %d > %d)", short(lb.RunID()), tb, ta)})
	s.check("B's token is larger than A's", tb > ta, "A %d, B %d", ta, tb)
	// B's writes run under B's lease context: they stop if B loses the lease.
	evB3 := rec.Emit(s.writeS3(lb.Context(), s.storeB, ActorB, lb.RunID(), tb)) //nolint:contextcheck // see above
	evBP := rec.Emit(s.writePG(lb.Context(), s.poolB, ActorB, lb.RunID(), tb))  //nolint:contextcheck // see above
	s.check("B's writes were accepted", evB3.Outcome == OK && evBP.Outcome == OK, "s3 %s, pg %s", evB3.Outcome, evBP.Outcome)

	// 5. A plain second acquisition while B holds is refused.
	_, err = s.mgrRetry.Acquire(ctx, s.key)
	var held *lease.HeldError
	if errors.As(err, &held) {
		rec.Emit(Event{Actor: ActorRetry, Kind: KindAcquire, Outcome: Held, Token: int64(held.Token), RunID: held.RunID.String(), Cause: err.Error(),
			Detail: fmt.Sprintf("Acquire refused (ErrHeld): run %s holds token %d for %v more", short(held.RunID), held.Token, held.Remaining.Round(time.Millisecond))})
	} else {
		rec.Emit(Event{Actor: ActorRetry, Kind: KindAcquire, Outcome: Failed, Cause: fmt.Sprint(err), Detail: fmt.Sprintf("expected ErrHeld, got %v", err)})
	}
	s.check("a second acquisition while B holds is refused with B as holder",
		held != nil && held.RunID == lb.RunID() && held.Token == tb, "%s", errText(err))

	// 6. An unauthorised client is turned away before it competes.
	before, err := s.seq(ctx)
	if err != nil {
		return res, fmt.Errorf("read token sequence: %w", err)
	}
	_, ierr := s.mgrIntr.Acquire(ctx, s.key)
	after, err := s.seq(ctx)
	if err != nil {
		return res, fmt.Errorf("read token sequence: %w", err)
	}
	var nm *NotMemberError
	unauth := errors.Is(ierr, lease.ErrUnauthorized) && errors.As(ierr, &nm)
	out := Unauthorized
	if !unauth {
		out = Failed
	}
	rec.Emit(Event{Actor: ActorIntrude, Kind: KindAcquire, Outcome: out, Cause: fmt.Sprint(ierr),
		Detail: fmt.Sprintf("Acquire refused (ErrUnauthorized); token sequence %d before, %d after: no token drawn, no row touched", before, after)})
	s.check("the unauthorised client drew no token", unauth && before == after, "%s; sequence %d → %d", errText(ierr), before, after)

	// The stall is deliberate and lasts at least 1.25 × TTL.
	if d := time.Until(stallAt.Add(ttl + ttl/4)); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		}
	}
	select {
	case e := <-aS3:
		aS3 <- e
		s.check("A's writes were still in flight during the stall", false, "the S3 write returned early: %s", e.Outcome)
	case e := <-aPG:
		aPG <- e
		s.check("A's writes were still in flight during the stall", false, "the PostgreSQL write returned early: %s", e.Outcome)
	default:
	}

	// 7. The network heals; A's in-flight writes arrive late and are refused.
	s.pgProxy.Restore()
	s.s3Proxy.Restore()
	healEv := rec.Emit(Event{Actor: ActorNet, Kind: KindHeal, Outcome: Note,
		Detail: fmt.Sprintf("network restored after a %v stall (TTL %v): A's held bytes are delivered", time.Since(stallAt).Round(time.Millisecond), ttl)})
	var evA3, evAP Event
	for _, ch := range []chan Event{aS3, aPG} {
		select {
		case e := <-ch:
			if e.Store == "s3" {
				evA3 = e
			} else {
				evAP = e
			}
		case <-ctx.Done():
			return res, fmt.Errorf("run A's writes never returned: %w", ctx.Err())
		}
	}
	for _, e := range []Event{evA3, evAP} {
		s.check("A's late "+e.Store+" write was refused as stale", e.Outcome == Stale && e.Presented == int64(ta) && e.Highest == int64(tb) && e.At > healEv.At,
			"outcome %s, presented %d, highest %d, answered at %+.3fs (heal %+.3fs)", e.Outcome, e.Presented, e.Highest, e.At.Seconds(), healEv.At.Seconds())
	}

	// 8. A's late renewal and late release change nothing.
	_, rerr := s.mgrA.Renew(ctx, s.key, la.RunID())
	o := Lost
	if !errors.Is(rerr, lease.ErrLost) {
		o = Failed
	}
	rec.Emit(Event{Actor: ActorA, Kind: KindRenew, Outcome: o, Token: int64(ta), RunID: la.RunID().String(), Cause: fmt.Sprint(rerr),
		Detail: "late renewal by run_id: the database refuses (ErrLost) — a late heartbeat cannot revive an expired lease"})
	rr, lerr := s.mgrA.Release(ctx, s.key, la.RunID())
	o = Lost
	if lerr != nil || rr != lease.ReleaseNotHolder {
		o = Failed
	}
	rec.Emit(Event{Actor: ActorA, Kind: KindRelease, Outcome: o, Token: int64(ta), RunID: la.RunID().String(), Status: rr.String(), Cause: fmt.Sprint(lerr),
		Detail: fmt.Sprintf("late release: %s — it matches run A's run_id only, B's lease is untouched", rr)})
	s.check("A's late renewal and release were refused", errors.Is(rerr, lease.ErrLost) && lerr == nil && rr == lease.ReleaseNotHolder,
		"renew: %v; release: %s%s", errText(rerr), rr, errSuffix(lerr))

	// 9. Both clients ask the server who owns the session and reconcile.
	stA, errA := s.mgrA.Inspect(ctx, s.key)
	stB, errB := s.mgrB.Inspect(ctx, s.key)
	if errA != nil || errB != nil {
		return res, fmt.Errorf("reconcile: inspect: %w", errors.Join(errA, errB))
	}
	rec.Emit(Event{Actor: ActorA, Kind: KindReconcile, Outcome: OK, Token: int64(stA.Token), RunID: stA.RunID.String(), Status: stA.State.String(),
		Detail: fmt.Sprintf("server: %s by run %s, not ours → desktop shows \"continued in another window\", composer read-only, discards run A's draft", stA.State, short(stA.RunID))})
	rec.Emit(Event{Actor: ActorB, Kind: KindReconcile, Outcome: OK, Token: int64(stB.Token), RunID: stB.RunID.String(), Status: stB.State.String(),
		Detail: fmt.Sprintf("server: %s by run %s, ours → browser shows the run as live here", stB.State, short(stB.RunID))})
	s.check("both clients see B as the owner", stA.Held() && stA.RunID == lb.RunID() && stA.Token == tb && stB.RunID == lb.RunID(),
		"desktop sees %s run %s token %d; browser sees %s run %s", stA.State, short(stA.RunID), stA.Token, stB.State, short(stB.RunID))

	// 10. B's tool call ends; B releases.
	rb, err := lb.Release(ctx)
	if err != nil {
		return res, fmt.Errorf("run B: release: %w", err)
	}
	rec.Emit(Event{Actor: ActorB, Kind: KindRelease, Outcome: OK, Token: int64(tb), RunID: lb.RunID().String(), Status: rb.String(),
		Detail: fmt.Sprintf("tool call done; release: %s", rb)})

	// 11. The end state.
	if s.cfg.beforeEnd != nil {
		if err := s.cfg.beforeEnd(ctx, s.poolB, s.table, res); err != nil {
			return res, err
		}
	}
	s.checkEnd(ctx, res)
	var failed []string
	for _, c := range s.checks {
		if !c.OK {
			failed = append(failed, c.Name+" ("+c.Detail+")")
		}
	}
	if len(failed) > 0 {
		return res, &CheckError{Failed: failed}
	}
	return res, nil
}

// takeOver is run B's acquisition. While the server says the lease is held
// (A's last renewal has not expired on the database clock yet), B waits for
// the expiry the server reported and looks again, then acquires. Acquire is
// a single conditional statement: if B were early after all, it gets
// ErrHeld, and AcquireWait finishes the job.
func (s *scenario) takeOver(ctx context.Context, st lease.Ownership) (*lease.Lease, error) {
	for i := 0; st.Held() && i < 3; i++ {
		t := time.NewTimer(st.Remaining + time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		var err error
		if st, err = s.mgrB.Inspect(ctx, s.key); err != nil {
			return nil, err
		}
		s.rec.Emit(Event{Actor: ActorB, Kind: KindInspect, Outcome: Note, Token: int64(st.Token), RunID: st.RunID.String(), Status: st.State.String(),
			Detail: fmt.Sprintf("server: %s (run %s stopped renewing) → the browser offers to continue here", st.State, short(st.RunID))})
	}
	l, err := s.mgrB.Acquire(ctx, s.key)
	if errors.Is(err, lease.ErrHeld) {
		wait, cancel := context.WithTimeout(ctx, 5*s.cfg.TTL)
		defer cancel()
		return s.mgrB.AcquireWait(wait, s.key)
	}
	return l, err
}

func (s *scenario) checkEnd(ctx context.Context, res *Result) {
	tb := res.TokenB
	wantBody := s.body(ActorB, res.RunB, tb)
	b, info, err := s.storeB.GetBytes(ctx, s.s3Key)
	s.check("the report object holds B's write", err == nil && string(b) == wantBody && info.Token == tb && info.Metadata["run_id"] == res.RunB.String(),
		"token %d, run_id %s, %d bytes%s", info.Token, short8(info.Metadata["run_id"]), len(b), errSuffix(err))
	m3, err3 := s.storeB.Mark(ctx, s.s3Key)
	mp, errp := s.marks.Mark(ctx, s.pgRes)
	s.check("both marks hold B's token", err3 == nil && errp == nil && m3 == tb && mp == tb, "s3 %d, pg %d (want %d)%s",
		m3, mp, tb, errSuffix(errors.Join(err3, errp)))
	rows, err := s.poolB.Query(ctx, `SELECT token, run_id, writer FROM `+s.table+` WHERE resource = $1 ORDER BY id`, s.pgRes)
	var got []string
	if err == nil {
		for rows.Next() {
			var t int64
			var run uuid.UUID
			var w string
			if err = rows.Scan(&t, &run, &w); err != nil {
				break
			}
			got = append(got, fmt.Sprintf("%s/%s/%d", w, short(run), t))
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	want := fmt.Sprintf("%s/%s/%d", ActorB, short(res.RunB), tb)
	s.check("the table holds exactly B's row", err == nil && len(got) == 1 && got[0] == want, "rows [%s], want [%s]%s", strings.Join(got, " "), want, errSuffix(err))
	st, err := s.mgrB.Inspect(ctx, s.key)
	s.check("the lease was last granted to B and released", err == nil && st.RunID == res.RunB && st.Token == tb && st.State == lease.StateReleased,
		"%s, run %s, token %d%s", st.State, short(st.RunID), st.Token, errSuffix(err))
}
