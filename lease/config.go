package lease

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/sql/migrations"
)

// Defaults and limits applied by New.
const (
	DefaultTTL         = 15 * time.Second
	MinTTL             = 100 * time.Millisecond
	MaxTTL             = 24 * time.Hour
	DefaultCallTimeout = 5 * time.Second
	DefaultWaitPoll    = 10 * time.Second
	// DefaultFallbackPoll is Config.FallbackPoll's default.
	DefaultFallbackPoll = time.Second
	// MaxBatch is the largest number of leases one renewal or release
	// statement carries.
	MaxBatch = 1000
)

// RenewalMode says how a Manager keeps its leases alive (Config.Renewal).
type RenewalMode uint8

const (
	// RenewalHeartbeat (the default) keeps one heartbeat row per Manager
	// (per epoch, migration 0009), renewed by one statement per RenewEvery
	// however many leases the Manager holds; a lease is held while its row
	// names the run and the heartbeat is unexpired. One Manager that
	// cannot renew loses all its leases at once (docs/lease.md, "One
	// heartbeat per Manager").
	RenewalHeartbeat RenewalMode = iota + 1
	// RenewalPerLease renews each lease's own row (batches of at most
	// MaxBatch leases per statement, as before migration 0009): one
	// lease's renewal failing does not end the others, at the cost of one
	// statement per MaxBatch leases per period.
	RenewalPerLease
)

// String names the mode ("heartbeat", "per-lease").
func (r RenewalMode) String() string {
	switch r {
	case RenewalHeartbeat:
		return "heartbeat"
	case RenewalPerLease:
		return "per-lease"
	}
	return "RenewalMode(" + strconv.Itoa(int(r)) + ")"
}

// Authorizer decides whether the caller may compete for key. It runs before
// any statement is sent: a refusal draws no token and writes no row.
type Authorizer interface {
	Authorize(ctx context.Context, key Key) error
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, key Key) error

// Authorize calls f(ctx, key).
func (f AuthorizerFunc) Authorize(ctx context.Context, key Key) error { return f(ctx, key) }

// Config configures a Manager. Zero fields take the documented defaults.
type Config struct {
	// Pool is the database (required). The Manager never closes it; close it
	// after Manager.Close. From the first grant or AcquireWait until Close
	// the Manager also holds two connections of its own, outside the pool's
	// MaxConns: one for LISTEN (the pool's settings, or ListenConnString's)
	// and one, with the pool's settings, that sends the listener's delivery
	// probe every WaitPoll.
	Pool *pgxpool.Pool
	// Schema holding fencekit_leases and fencekit_token_seq (migration set
	// migrations.Lease). Default "public". Must pass migrations.ValidateIdentifier.
	Schema string
	// TTL is the lease length set by each acquire and renew, on the database
	// clock, truncated to microseconds. Default 15s; MinTTL ≤ TTL ≤ MaxTTL.
	TTL time.Duration
	// SafetyMargin is subtracted from TTL for the local trust deadline
	// (sent_at + TTL − SafetyMargin). It absorbs clock-rate differences and
	// scheduling delay. Default TTL/5; 0 < SafetyMargin < TTL.
	SafetyMargin time.Duration
	// RenewEvery is the renewal period measured from the last renewal's
	// sent_at. Default TTL/3 (or half the trust window when that is
	// shorter); 0 < RenewEvery < TTL − SafetyMargin.
	RenewEvery time.Duration
	// CallTimeout bounds every statement the Manager sends, including
	// background renewals and the release at Close. It must be below
	// TTL − SafetyMargin − RenewEvery (7s with the defaults): the renewer
	// sends at most four batches at a time (at most half the pool's
	// connections) and waits for a round's batches before the next tick, so
	// one statement stuck for CallTimeout delays the next renewals by as
	// much. Default DefaultCallTimeout (5s), lowered to 3/4 of that bound
	// when it is shorter (TTL 1s: 350ms), so that a renewal retried after
	// one stalled statement still starts inside the trust window; an
	// explicit value at or above the bound is a *fence.ConfigError.
	CallTimeout time.Duration
	// WaitPoll is the safety-net poll interval of AcquireWait and the
	// period of the LISTEN connection's delivery probe. Default 10s.
	WaitPoll time.Duration
	// ListenConnString, when set, is the connection string (pgx.ParseConfig
	// syntax: URL or key=value) of the Manager's LISTEN connection, used
	// instead of the pool's settings. Set it when Pool goes through a
	// pooler in transaction mode (PgBouncer pool_mode=transaction, RDS
	// Proxy, most hosted poolers), which cannot deliver notifications:
	// point it at the database directly, or at a PgBouncer pool in session
	// mode. The connection only LISTENs and sends the displaced-run check.
	// A malformed string fails New with a *fence.ConfigError and starts nothing.
	ListenConnString string
	// FallbackPoll is how often the Manager polls instead while its
	// listener does not receive notifications (a probe NOTIFY sent with the
	// pool's settings did not come back within CallTimeout; see Health): each
	// poll makes every AcquireWait and Watch re-read its key and, in
	// per-lease mode, ends the leases a takeover displaced (one statement
	// per 1,000 leases held); in heartbeat mode the heartbeat does that,
	// within RenewEvery. It bounds how late a waiter or a watcher (and, per
	// lease, a displaced holder) learns of a change then. Default 1s.
	FallbackPoll time.Duration
	// Authorizer, if set, runs before every acquisition attempt.
	Authorizer Authorizer
	// Logger receives the Manager's logs. Nil discards them. The happy path
	// (acquire, renew, release) logs at Debug only; a lost lease, a failed
	// renewal statement and a listener disconnect log at Warn. Log records
	// carry the key and run_id (metrics never do).
	Logger *slog.Logger
	// MeterProvider creates the Manager's OpenTelemetry instruments (names
	// documented in docs/operations.md). Nil
	// records nothing (the no-op provider).
	MeterProvider metric.MeterProvider
	// TracerProvider records the Manager's spans (names, attribute keys
	// and outcomes in package lease/leasetrace, documented in
	// docs/operations.md). Nil records none and costs nothing, like a nil
	// MeterProvider; pass otel.GetTracerProvider() for the global one.
	// Spans, unlike metrics, carry account, session and run ids and tokens.
	TracerProvider trace.TracerProvider
	// Renewal chooses how leases are renewed: RenewalHeartbeat (the zero
	// value's default) or RenewalPerLease. Every lease of a Manager has the
	// Manager's TTL in either mode. Managers of both modes (and of the
	// previous release) may share a schema migrated to version 9 or later.
	Renewal RenewalMode
	// Floor is where the Manager reads the token floor when a grant is
	// refused because the floor was not checked on this database node
	// (ErrFailoverUnchecked: after a promotion, switchover or restore) or
	// because the sequence is not above the floor (ErrTokenFloor): the
	// Manager then runs the schema's floor check itself and, when it
	// passes, grants in the same call. The zero value configures no
	// source: such grants stay refused until an operator runs the check
	// (package leaseops). See FloorConfig.
	Floor FloorConfig
}

// resolved is a validated Config with defaults filled in.
type resolved struct {
	Config
	qSchema string          // quoted schema
	listen  *pgx.ConnConfig // parsed ListenConnString, nil when unset
}

func (c Config) resolve() (resolved, error) {
	r := resolved{Config: c}
	if c.Pool == nil {
		return r, configErr("Pool", "nil", nil)
	}
	if r.Schema == "" {
		r.Schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(r.Schema)
	if err != nil {
		return r, configErr("Schema", err.Error(), err)
	}
	r.qSchema = q
	if r.TTL == 0 {
		r.TTL = DefaultTTL
	}
	switch {
	case r.TTL < 0:
		return r, configErr("TTL", "negative: "+r.TTL.String(), nil)
	case r.TTL < MinTTL:
		return r, configErr("TTL", r.TTL.String()+" is below the minimum "+MinTTL.String(), nil)
	case r.TTL > MaxTTL:
		return r, configErr("TTL", r.TTL.String()+" is above the maximum "+MaxTTL.String(), nil)
	}
	r.TTL = r.TTL.Truncate(time.Microsecond)
	if r.SafetyMargin == 0 {
		r.SafetyMargin = r.TTL / 5
	}
	if r.SafetyMargin < 0 || r.SafetyMargin >= r.TTL {
		return r, configErr("SafetyMargin", r.SafetyMargin.String()+" must be > 0 and < TTL "+r.TTL.String(), nil)
	}
	window := r.TTL - r.SafetyMargin
	if r.RenewEvery == 0 {
		r.RenewEvery = min(r.TTL/3, window/2)
	}
	if r.RenewEvery <= 0 || r.RenewEvery >= window {
		return r, configErr("RenewEvery", r.RenewEvery.String()+" must be > 0 and < TTL − SafetyMargin "+window.String(), nil)
	}
	bound := window - r.RenewEvery
	if r.CallTimeout == 0 {
		r.CallTimeout = min(DefaultCallTimeout, bound*3/4)
	}
	if r.CallTimeout < 0 {
		return r, configErr("CallTimeout", "negative: "+r.CallTimeout.String(), nil)
	}
	if r.CallTimeout >= bound {
		return r, configErr("CallTimeout", r.CallTimeout.String()+
			" must be < TTL − SafetyMargin − RenewEvery "+bound.String()+" (a stalled statement delays the next renewal by CallTimeout)", nil)
	}
	if r.WaitPoll == 0 {
		r.WaitPoll = DefaultWaitPoll
	}
	if r.WaitPoll < 0 {
		return r, configErr("WaitPoll", "negative: "+r.WaitPoll.String(), nil)
	}
	if r.FallbackPoll == 0 {
		r.FallbackPoll = DefaultFallbackPoll
	}
	if r.FallbackPoll < 0 {
		return r, configErr("FallbackPoll", "negative: "+r.FallbackPoll.String(), nil)
	}
	if r.ListenConnString != "" {
		lc, err := pgx.ParseConfig(r.ListenConnString)
		if err != nil {
			// pgx's message quotes the string, and its password masking is
			// best effort: neither the string nor that message is kept.
			return r, configErr("ListenConnString", "not a valid connection string (pgx.ParseConfig refused it; it is not repeated here since it may hold a password)", nil)
		}
		r.listen = lc
	}
	if r.Renewal == 0 {
		r.Renewal = RenewalHeartbeat
	}
	if r.Renewal != RenewalHeartbeat && r.Renewal != RenewalPerLease {
		return r, configErr("Renewal", "unknown mode "+r.Renewal.String(), nil)
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := r.resolveFloor(); err != nil {
		return r, err
	}
	return r, nil
}
