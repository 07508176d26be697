package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
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
	// The second scene: run C (desktop) is taken over while alive by run D
	// (browser); TakeoverNotice is the time from Takeover returning to C's
	// context ending (negative if it ended first).
	RunC, RunD     uuid.UUID
	TokenC, TokenD fence.Token
	TakeoverNotice time.Duration
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
	actor    *Actor // the device's current run (device.as)
	user     string
	accounts []string
}

func (m member) Authorize(_ context.Context, key lease.Key) error {
	for _, a := range m.accounts {
		if a == key.AccountID {
			m.rec.Emit(Event{Actor: *m.actor, Kind: KindAuthorize, Outcome: OK,
				Detail: fmt.Sprintf("%s is a member of %q: may compete for the session", m.user, key.AccountID)})
			return nil
		}
	}
	err := &NotMemberError{User: m.user, Account: key.AccountID}
	m.rec.Emit(Event{Actor: *m.actor, Kind: KindAuthorize, Outcome: Unauthorized, Cause: err.Error(),
		Detail: "refused before any statement: " + err.Error()})
	return err
}

// scenario is the plumbing of one run: connections, fault proxies, the
// devices of story.go and their teardown.
type scenario struct {
	cfg    ScenarioConfig
	tell   *teller
	key    lease.Key
	report report
	qSeq   string // quoted schema.sequence
	bucket string

	pgProxy, s3Proxy    *netproxy.Proxy
	poolA, poolB, poolC *pgxpool.Pool
	storeA, storeB      *s3guard.Guard
	marks               *pgguard.Guard // reads marks for the checks

	// desktop (run A, through the proxies), browser (run B), a plain second
	// acquisition by the same user, and a user of another account.
	desktop, browser, retry, intruder *device
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
	if err := checkNames(key); err != nil {
		return nil, err
	}
	q, _ := migrations.QuoteIdentifier(cfg.Conn.Schema)
	s := &scenario{cfg: cfg, key: key, bucket: cfg.Conn.Bucket, qSeq: q + ".fencekit_token_seq",
		report: report{object: S3Key(key), resource: PGResource(key), table: q + "." + ReportsTable}}

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+20*cfg.TTL)
	defer cancel()
	if err := s.setup(ctx); err != nil {
		s.teardown() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
		return nil, err
	}
	defer s.teardown() //nolint:contextcheck // shutdown: Manager.Close bounds its own release
	s.tell = &teller{s: s, rec: NewRecorder(cfg.Sink)}
	res, err := s.run(ctx)
	res.Events = s.tell.rec.Events()
	res.Checks = s.tell.checks
	return res, err
}

// run builds the devices, tells the story and checks the end state.
func (s *scenario) run(ctx context.Context) (*Result, error) {
	res := &Result{Key: s.key, TTL: s.cfg.TTL, S3Key: s.report.object, PGResource: s.report.resource}
	if err := s.devices(); err != nil {
		return res, err
	}
	if err := s.story(ctx, res); err != nil {
		return res, err
	}
	if err := s.continueWhileRunning(ctx, res); err != nil {
		return res, err
	}
	if s.cfg.beforeEnd != nil {
		if err := s.cfg.beforeEnd(ctx, s.poolB, s.report.table, res); err != nil {
			return res, err
		}
	}
	s.checkEnd(ctx, res)
	var failed []string
	for _, c := range s.tell.checks {
		if !c.OK {
			failed = append(failed, c.Name+" ("+c.Detail+")")
		}
	}
	if len(failed) > 0 {
		return res, &CheckError{Failed: failed}
	}
	return res, nil
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
	if s.marks, err = pgguard.New(pgguard.Config{DB: s.poolB, Schema: c.Schema}); err != nil {
		return err
	}
	return nil
}

// devices are built once the Recorder exists (their Authorizers record).
func (s *scenario) devices() error {
	mk := func(a Actor, name, run string, pool *pgxpool.Pool, st *s3guard.Guard, user string, accounts ...string) (*device, error) {
		pg, err := pgguard.New(pgguard.Config{DB: pool, Schema: s.cfg.Conn.Schema})
		if err != nil {
			return nil, err
		}
		d := &device{actor: a, name: name, run: run, pool: pool, s3: st, pg: pg}
		// CallTimeout is left to lease.New, which derives it inside the
		// trust window (TTL − SafetyMargin − RenewEvery) for any --ttl.
		mgr, err := lease.New(lease.Config{
			Pool: pool, Schema: s.cfg.Conn.Schema, TTL: s.cfg.TTL, RenewEvery: s.renewEvery(),
			Authorizer: member{rec: s.tell.rec, actor: &d.actor, user: user, accounts: accounts},
		})
		if err != nil {
			return nil, err
		}
		d.mgr = mgr
		return d, nil
	}
	var err error
	if s.desktop, err = mk(ActorA, "desktop", "run A", s.poolA, s.storeA, User, s.key.AccountID); err != nil {
		return err
	}
	if s.browser, err = mk(ActorB, "browser", "run B", s.poolB, s.storeB, User, s.key.AccountID); err != nil {
		return err
	}
	if s.retry, err = mk(ActorRetry, "desktop", "retry", s.poolC, s.storeB, User, s.key.AccountID); err != nil {
		return err
	}
	s.intruder, err = mk(ActorIntrude, "intruder", "intruder", s.poolC, s.storeB, Intruder, "globex")
	return err
}

func (s *scenario) teardown() {
	for _, p := range []*netproxy.Proxy{s.pgProxy, s.s3Proxy} {
		if p != nil {
			p.Restore()
		}
	}
	for _, d := range []*device{s.desktop, s.browser, s.retry, s.intruder} {
		if d != nil {
			_ = d.mgr.Close()
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

// renewEvery is the devices' renewal period (lease.Config.RenewEvery): the
// lease default for the scenario's TTL, set explicitly so that the second
// scene can tell a notification from a renewal.
func (s *scenario) renewEvery() time.Duration { return s.cfg.TTL / 3 }

// stall blackholes run A's proxies to both stores and returns when.
func (s *scenario) stall() time.Time {
	at := time.Now()
	s.pgProxy.Blackhole()
	s.s3Proxy.Blackhole()
	s.tell.stalled()
	return at
}

// restore heals run A's proxies (idempotent).
func (s *scenario) restore() {
	s.pgProxy.Restore()
	s.s3Proxy.Restore()
}

// until sleeps until t or ctx ends.
func (s *scenario) until(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tokenSeq reads the token sequence's last value.
func (s *scenario) tokenSeq(ctx context.Context) (int64, error) {
	var v int64
	if err := s.poolC.QueryRow(ctx, `SELECT last_value FROM `+s.qSeq).Scan(&v); err != nil {
		return 0, fmt.Errorf("read token sequence: %w", err)
	}
	return v, nil
}

// checkEnd reads the stores and the lease back and checks the end state:
// the last writer is D (second scene); B's row from the first scene stays.
func (s *scenario) checkEnd(ctx context.Context, res *Result) {
	td, check := res.TokenD, s.tell.check
	wantBody := s.body(ActorD, fence.Claim{Token: td, Run: res.RunD.String()})
	b, info, err := s.storeB.GetBytes(ctx, s.report.object)
	check("the report object holds D's write", err == nil && string(b) == wantBody && info.Token == td && info.Metadata["run_id"] == res.RunD.String(),
		"token %d, run_id %s, %d bytes%s", info.Token, short8(info.Metadata["run_id"]), len(b), errSuffix(err))
	m3, err3 := s.storeB.Mark(ctx, s.report.object)
	mp, errp := s.marks.Mark(ctx, s.report.resource)
	check("both marks hold D's token", err3 == nil && errp == nil && m3.Token == td && mp.Token == td, "s3 %d, pg %d (want %d)%s",
		m3.Token, mp.Token, td, errSuffix(errors.Join(err3, errp)))
	rows, err := s.poolB.Query(ctx, `SELECT token, run_id, writer FROM `+s.report.table+` WHERE resource = $1 ORDER BY id`, s.report.resource)
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
	want := []string{fmt.Sprintf("%s/%s/%d", ActorB, short(res.RunB), res.TokenB), fmt.Sprintf("%s/%s/%d", ActorD, short(res.RunD), td)}
	check("the table holds exactly B's and D's rows", err == nil && strings.Join(got, " ") == strings.Join(want, " "),
		"rows [%s], want [%s]%s", strings.Join(got, " "), strings.Join(want, " "), errSuffix(err))
	st, err := s.browser.mgr.Inspect(ctx, s.key)
	check("the lease was last granted to D and released", err == nil && st.RunID == res.RunD && st.Token == td && st.State == lease.StateReleased,
		"%s, run %s, token %d%s", st.State, short(st.RunID), st.Token, errSuffix(err))
}
