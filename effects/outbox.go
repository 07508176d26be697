package effects

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Limits and defaults.
const (
	// MaxRequestKeyLen is the longest request key, in bytes.
	MaxRequestKeyLen = 255
	// MaxTargetLen is the longest target name, in bytes.
	MaxTargetLen = 128
	// DefaultMaxRequestBytes is Config.MaxRequestBytes's default (1 MiB).
	DefaultMaxRequestBytes = 1 << 20
	// DefaultDedupWindow is Target.DedupWindow's default: 24 hours, the
	// shortest window common payment APIs keep an idempotency key.
	DefaultDedupWindow = 24 * time.Hour
	// DefaultLockTimeout is Config.LockTimeout's default.
	DefaultLockTimeout = 5 * time.Second
	// DefaultAwaitPoll is Config.AwaitPoll's default.
	DefaultAwaitPoll = 100 * time.Millisecond
)

// Target is a destination effects are delivered to, by name.
type Target struct {
	// Name identifies the target in Effect.Target: 1..MaxTargetLen bytes
	// of ASCII letters, digits and '.', '_', '-', ':'.
	Name string
	// Deliverer sends an effect's request to the target. It may be nil in
	// an Outbox that only records (a relay needs it). If it implements
	// Validator, Record validates each request with it before any I/O.
	Deliverer Deliverer
	// DedupWindow is how long the target keeps an idempotency key: an
	// effect whose first send is older than that and whose outcome is
	// still unknown ends ambiguous instead of being sent again (a resend
	// could be a second effect). Default DefaultDedupWindow. Ignored with
	// AtMostOnce.
	DedupWindow time.Duration
	// AtMostOnce is for targets without idempotency keys (SMTP): each
	// claim commits the state sending before the send, and an effect found
	// sending by a later claim (its relay crashed or stalled mid-send) ends
	// ambiguous, never resent. An error wrapped with NotSent is retried.
	AtMostOnce bool
}

// Validator is implemented by Deliverers that can check a frozen request
// before it is recorded (HTTP checks its method and URL). Its error should
// match ErrInvalidEffect.
type Validator interface {
	Validate(request []byte) error
}

// Config configures an Outbox.
type Config struct {
	// Pool is the lease database (required): the effects table and the
	// lease table must both be reachable in one transaction.
	Pool *pgxpool.Pool
	// Schema holds fencekit_effects (migrations.Effects). Default "public".
	Schema string
	// LeaseSchema holds fencekit_leases (migrations.Lease), in the same
	// database. Default: Schema.
	LeaseSchema string
	// Targets are the destinations effects may name. An Outbox without
	// targets records nothing (ErrUnknownTarget) but reads, cancels and
	// retries effects (the fencekit CLI's).
	Targets []Target
	// MaxRequestBytes bounds a frozen request. Default
	// DefaultMaxRequestBytes; at most 64 MiB.
	MaxRequestBytes int
	// LockTimeout bounds the lease-row lock wait of Record and
	// CancelDisplaced in the transactions they open themselves (the
	// caller's transaction keeps its own settings). Default
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// AwaitPoll is how often Await reads an effect's state when no
	// outcome notification woke it (the fallback). Default
	// DefaultAwaitPoll.
	AwaitPoll time.Duration
	// Logger receives the relays' warnings. Nil discards.
	Logger *slog.Logger
	// MeterProvider receives the instruments of the Outbox and its Relays
	// (package effects/effectsobs names them). Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records the spans effectsobs.SpanRecord and
	// effectsobs.SpanDeliver. With it, a record stores its span's W3C
	// traceparent in the effect row, and each delivery span links to it.
	// Nil records none and costs nothing.
	TracerProvider trace.TracerProvider
}

// Outbox records effects under a lease claim and answers questions about
// them. It is safe for concurrent use. Relays (NewRelay) deliver them.
type Outbox struct {
	pool        *pgxpool.Pool
	schema      string
	leaseSchema string
	targets     map[string]Target
	maxReq      int
	lockTimeout string
	awaitPoll   time.Duration
	log         *slog.Logger
	channel     string
	outcomes    string // NOTIFY channel of final outcomes (Await)
	aw          awaiter
	st          statements
	obs         *observer
}

// Effect is one external call to record.
type Effect struct {
	// Target names a configured Target.
	Target string
	// Key is the lease key the producer holds. The zero Key means the
	// key of the claim's scope (a lease's claim carries it).
	Key lease.Key
	// RequestKey is the caller's own name for this call, unique per lease
	// key: recording the same (Key, RequestKey) again returns the first
	// effect's id. 1..MaxRequestKeyLen bytes of UTF-8 without NUL.
	RequestKey string
	// Request is the frozen request, delivered byte for byte on every
	// attempt (HTTPRequest.Freeze, Mail.Freeze, or any bytes the target's
	// Deliverer understands). Non-empty, at most Config.MaxRequestBytes.
	Request []byte
}

// New validates cfg and returns an Outbox. It does no I/O.
func New(cfg Config) (*Outbox, error) {
	if cfg.Pool == nil {
		return nil, &fence.ConfigError{Source: "effects", Field: "Pool", Reason: "nil"}
	}
	o := &Outbox{pool: cfg.Pool, schema: cfg.Schema, leaseSchema: cfg.LeaseSchema, log: cfg.Logger}
	if o.schema == "" {
		o.schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(o.schema)
	if err != nil {
		return nil, &fence.ConfigError{Source: "effects", Field: "Schema", Reason: err.Error(), Err: err}
	}
	if o.leaseSchema == "" {
		o.leaseSchema = o.schema
	}
	leaseQ, err := migrations.QuoteIdentifier(o.leaseSchema)
	if err != nil {
		return nil, &fence.ConfigError{Source: "effects", Field: "LeaseSchema", Reason: err.Error(), Err: err}
	}
	o.targets = make(map[string]Target, len(cfg.Targets))
	for i, t := range cfg.Targets {
		field := fmt.Sprintf("Targets[%d]", i)
		if err := validateTargetName(t.Name); err != nil {
			return nil, &fence.ConfigError{Source: "effects", Field: field + ".Name", Reason: err.Error()}
		}
		if _, dup := o.targets[t.Name]; dup {
			return nil, &fence.ConfigError{Source: "effects", Field: field + ".Name", Reason: fmt.Sprintf("%q configured twice", t.Name)}
		}
		if t.DedupWindow < 0 {
			return nil, &fence.ConfigError{Source: "effects", Field: field + ".DedupWindow", Reason: "negative"}
		}
		if t.DedupWindow == 0 {
			t.DedupWindow = DefaultDedupWindow
		}
		o.targets[t.Name] = t
	}
	o.maxReq = cfg.MaxRequestBytes
	switch {
	case o.maxReq == 0:
		o.maxReq = DefaultMaxRequestBytes
	case o.maxReq < 0 || o.maxReq > 64<<20:
		return nil, &fence.ConfigError{Source: "effects", Field: "MaxRequestBytes", Reason: fmt.Sprintf("%d not in 1..64 MiB", o.maxReq)}
	}
	lt := cfg.LockTimeout
	switch {
	case lt == 0:
		lt = DefaultLockTimeout
	case lt < time.Millisecond:
		return nil, &fence.ConfigError{Source: "effects", Field: "LockTimeout", Reason: "below 1ms"}
	}
	o.lockTimeout = fmt.Sprintf("%dms", lt.Milliseconds())
	o.awaitPoll = cfg.AwaitPoll
	switch {
	case o.awaitPoll == 0:
		o.awaitPoll = DefaultAwaitPoll
	case o.awaitPoll < 0:
		return nil, &fence.ConfigError{Source: "effects", Field: "AwaitPoll", Reason: "negative"}
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	o.channel = channelName(o.schema)
	o.outcomes = outcomeChannelName(o.schema)
	o.st = newStatements(q, leaseQ)
	if o.obs, err = newObserver(cfg.MeterProvider, cfg.TracerProvider, o.schema, o.targets); err != nil {
		return nil, err
	}
	return o, nil
}

// Schema is the schema holding the effects table.
func (o *Outbox) Schema() string { return o.schema }

func validateTargetName(name string) error {
	if name == "" || len(name) > MaxTargetLen {
		return fmt.Errorf("target name must be 1..%d bytes, got %d", MaxTargetLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '.', c == '_', c == ':', c == '-':
		default:
			return fmt.Errorf("target name %q: byte %#x at %d not allowed", name, c, i)
		}
	}
	return nil
}

// channelName is the NOTIFY channel of the schema's new effects: an
// identifier of at most 63 bytes (a long schema is hashed).
func channelName(schema string) string { return channelWith("fencekit_effects_", schema) }

// outcomeChannelName is the NOTIFY channel of the schema's final outcomes
// (payload: the effect id), which Await listens on.
func outcomeChannelName(schema string) string { return channelWith("fencekit_outcomes_", schema) }

func channelWith(prefix, schema string) string {
	if len(prefix)+len(schema) <= 63 {
		return prefix + schema
	}
	h := sha256.Sum256([]byte(schema))
	return prefix + hex.EncodeToString(h[:12])
}

// Record records e under the claim ctx carries (fence.ClaimFromContext: a
// lease's Context carries its claim; fence.WithClaim sets one), in a
// transaction of its own that also checks the claim against the lease
// row, as lease.CheckClaimTx does. See RecordTx for the check, the
// duplicate and conflict rules and the errors. The transaction is
// implicit: Config.LockTimeout and the one record statement go to the
// server in one round trip and commit together; a connection lost after
// they were sent is an outcome-unknown error (fence.ErrOutcomeUnknown
// family), as a lost COMMIT would be.
func (o *Outbox) Record(ctx context.Context, e Effect) (uuid.UUID, error) {
	claim, err := claimFromContext(ctx, "Record")
	if err != nil {
		return uuid.Nil, err
	}
	key, err := o.checkInput(claim, &e)
	if err != nil {
		return uuid.Nil, err
	}
	return o.record(ctx, nil, key, claim, e)
}

// RecordTx records e in the caller's transaction tx (for example inside
// pgguard's InTx, so that the effect commits with the caller's own writes)
// under the claim ctx carries (fence.ClaimFromContext), only while that
// claim is the current grant of the effect's lease key: one statement in
// tx checks the key's lease row as lease.CheckClaimTx does (the row
// carries the claim's run and token and is live on the database clock,
// and stays share-locked until tx ends, so a takeover granted concurrently
// is ordered before the check, which then fails, or after tx's commit) and
// inserts the effect only if it passed; on a refusal lease.CheckClaimTx
// runs in tx to name the reason. The insert notifies the relays at commit.
// An effect with the same (lease key, request key) as one recorded before
// returns that effect's id and records nothing new; with another target or
// request it is a *ConflictError.
//
// Errors, all with nothing recorded: input errors before any I/O
// (fence.ErrNilArgument, fence.ErrNoToken when ctx carries no claim, a
// *InputError matching ErrInvalidEffect, ErrUnknownTarget, the claim's
// validation errors, a Validator's error); fence.ErrStale (the claim is no
// longer current: a takeover, an expiry or a release happened),
// fence.ErrTokenReused, fence.ErrBusy (lock timeout, serialization
// failure, deadlock: retry the transaction), ErrConflict. After any error
// but the input errors tx has been rolled back, so work done in it earlier
// cannot commit without the effect. tx must be the outermost transaction
// and on the lease database. The effect exists once tx commits; it is
// delivered by a relay.
func (o *Outbox) RecordTx(ctx context.Context, tx pgx.Tx, e Effect) (uuid.UUID, error) {
	if ctx == nil {
		return uuid.Nil, fmt.Errorf("effects: Record with nil ctx: %w", fence.ErrNilArgument)
	}
	if tx == nil {
		return uuid.Nil, fmt.Errorf("effects: Record with nil tx: %w", fence.ErrNilArgument)
	}
	claim, err := claimFromContext(ctx, "Record")
	if err != nil {
		return uuid.Nil, err
	}
	key, err := o.checkInput(claim, &e)
	if err != nil {
		return uuid.Nil, err
	}
	id, err := o.record(ctx, tx, key, claim, e)
	if err != nil {
		rollback(ctx, tx)
	}
	return id, err
}

func claimFromContext(ctx context.Context, op string) (fence.Claim, error) {
	if ctx == nil {
		return fence.Claim{}, fmt.Errorf("effects: %s with nil ctx: %w", op, fence.ErrNilArgument)
	}
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return fence.Claim{}, fmt.Errorf("effects: %s: %w", op, err)
	}
	return c, nil
}

// checkInput validates e and claim and returns the lease key.
func (o *Outbox) checkInput(claim fence.Claim, e *Effect) (lease.Key, error) {
	t, ok := o.targets[e.Target]
	if !ok {
		return lease.Key{}, fmt.Errorf("effects: target %q: %w", shorten(e.Target), ErrUnknownTarget)
	}
	if err := ValidateRequestKey(e.RequestKey); err != nil {
		return lease.Key{}, err
	}
	switch {
	case len(e.Request) == 0:
		return lease.Key{}, &InputError{Field: "Request", Reason: "empty"}
	case len(e.Request) > o.maxReq:
		return lease.Key{}, &InputError{Field: "Request", Reason: fmt.Sprintf("%d bytes, limit %d", len(e.Request), o.maxReq)}
	}
	if v, ok := t.Deliverer.(Validator); ok {
		if err := v.Validate(e.Request); err != nil {
			return lease.Key{}, err
		}
	}
	if err := claim.Validate(); err != nil {
		return lease.Key{}, err
	}
	key := e.Key
	if key == (lease.Key{}) {
		k, err := KeyFromScope(claim.Scope)
		if err != nil {
			return lease.Key{}, err
		}
		key = k
	}
	if err := key.Validate(); err != nil {
		return lease.Key{}, err
	}
	// lease.CheckClaimTx's checks before its I/O (the record statement
	// does its reading): a bad claim is refused before any statement, so
	// the caller's transaction stays usable.
	if claim.Run == "" {
		return lease.Key{}, fmt.Errorf("effects: %w: the claim has no run identity; a lease claim (Lease.Context) carries one", fence.ErrInvalidRun)
	}
	if _, err := uuid.Parse(claim.Run); err != nil {
		return lease.Key{}, fmt.Errorf("effects: %w: %q is not a lease run_id (UUID)", fence.ErrInvalidRun, shorten(claim.Run))
	}
	if claim.Scope != "" && claim.Scope != key.Scope() {
		return lease.Key{}, &fence.ScopeError{Resource: key.Scope(), Scope: claim.Scope}
	}
	return key, nil
}

// ValidateRequestKey checks a request key: 1..MaxRequestKeyLen bytes of
// valid UTF-8 without NUL. The error is a *InputError.
func ValidateRequestKey(k string) error {
	switch {
	case k == "":
		return &InputError{Field: "RequestKey", Reason: "empty"}
	case len(k) > MaxRequestKeyLen:
		return &InputError{Field: "RequestKey", Reason: fmt.Sprintf("%d bytes, limit %d", len(k), MaxRequestKeyLen)}
	case !utf8.ValidString(k):
		return &InputError{Field: "RequestKey", Reason: "not valid UTF-8"}
	case strings.IndexByte(k, 0) >= 0:
		return &InputError{Field: "RequestKey", Reason: "contains NUL"}
	}
	return nil
}

// KeyFromScope returns the lease key whose Scope is scope (a lease claim's
// Claim.Scope). The error is a *InputError for an empty scope or one that
// lease.Key.Scope cannot have produced.
func KeyFromScope(scope string) (lease.Key, error) {
	if scope == "" {
		return lease.Key{}, &InputError{Field: "Key", Reason: "zero, and the claim has no scope to take it from (set Effect.Key, or record with a lease's claim)"}
	}
	a, s, ok := strings.Cut(scope, "/")
	if !ok || strings.Contains(s, "/") {
		return lease.Key{}, &InputError{Field: "Key", Reason: fmt.Sprintf("claim scope %q is not a lease key's scope", shorten(scope))}
	}
	acct, err1 := url.PathUnescape(a)
	sess, err2 := url.PathUnescape(s)
	k := lease.Key{AccountID: acct, SessionID: sess}
	if err1 != nil || err2 != nil || k.Scope() != scope {
		return lease.Key{}, &InputError{Field: "Key", Reason: fmt.Sprintf("claim scope %q is not a lease key's scope", shorten(scope))}
	}
	return k, nil
}

// record runs the record statement: in tx, or (tx nil) in an implicit
// transaction of its own, batched with the lock timeout.
func (o *Outbox) record(ctx context.Context, tx pgx.Tx, key lease.Key, claim fence.Claim, e Effect) (id uuid.UUID, err error) {
	ctx, span := o.obs.startRecord(ctx, key, claim, e)
	dup := false
	defer func() { o.obs.endRecord(ctx, span, e.Target, id, dup, err) }()
	var (
		ok            bool
		newID, exID   *string
		same          bool
		args          = []any{e.Target, key.AccountID, key.SessionID, claim.Run, int64(claim.Token), e.RequestKey, e.Request, o.channel, span.traceparent(ctx)}
		scan          = func(row pgx.Row) error { return row.Scan(&ok, &newID, &exID, &same) }
		q             querier
		existingQuery = func() (string, bool, error) {
			var idText string
			var same bool
			err := q.QueryRow(ctx, o.st.existing, key.AccountID, key.SessionID, e.RequestKey, e.Target, e.Request).Scan(&idText, &same)
			return idText, same, err
		}
	)
	if tx != nil {
		q = tx
		if err := scan(tx.QueryRow(ctx, o.st.record, args...)); err != nil {
			return uuid.Nil, o.dbError(ctx, "record effect", err)
		}
	} else {
		q = o.pool
		if ctx.Err() != nil {
			return uuid.Nil, fmt.Errorf("effects: not recorded: %w", fence.ContextError(ctx))
		}
		b := &pgx.Batch{}
		b.Queue(o.st.lockTimeout, o.lockTimeout)
		b.Queue(o.st.record, args...).QueryRow(scan)
		if err := o.pool.SendBatch(ctx, b).Close(); err != nil {
			var pe *pgconn.PgError
			if pgconn.SafeToRetry(err) || errors.As(err, &pe) {
				return uuid.Nil, o.dbError(ctx, "record effect", err) // nothing committed
			}
			return uuid.Nil, fence.OutcomeUnknown(ctx, "effects: record", key.Scope(), err)
		}
	}
	if !ok {
		return uuid.Nil, fmt.Errorf("effects: record %q: %w", e.RequestKey, o.refusal(ctx, tx, key, claim))
	}
	if newID != nil {
		return uuid.Parse(*newID)
	}
	idText := ""
	if exID != nil {
		idText = *exID
	} else { // recorded by a transaction that committed after the statement began
		if idText, same, err = existingQuery(); err != nil {
			return uuid.Nil, o.dbError(ctx, "read existing effect", err)
		}
	}
	id, perr := uuid.Parse(idText)
	if perr != nil {
		return uuid.Nil, perr
	}
	if !same {
		return uuid.Nil, &ConflictError{RequestKey: e.RequestKey, Existing: id}
	}
	dup = true
	return id, nil
}

// querier is what record reads with: the caller's tx or the pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// refusal names why the record statement found claim not current: it runs
// lease.CheckClaimTx in tx, or in a transaction of its own (rolled back). A
// claim that lease.CheckClaimTx then finds current (it was not when the
// record ran) is still refused as stale.
func (o *Outbox) refusal(ctx context.Context, tx pgx.Tx, key lease.Key, claim fence.Claim) error {
	if tx == nil {
		own, err := o.pool.Begin(ctx)
		if err != nil {
			return o.dbError(ctx, "begin", err)
		}
		defer rollback(ctx, own)
		tx = own
	}
	if err := lease.CheckClaimTx(ctx, tx, o.leaseSchema, key, claim); err != nil {
		return err
	}
	return &fence.StaleError{Resource: key.Scope(), Presented: claim.Token, Highest: claim.Token}
}

func (o *Outbox) dbError(ctx context.Context, op string, err error) error {
	if fence.ContextError(ctx) != nil {
		return fence.WrapContext(ctx, fmt.Errorf("effects: %s: %w", op, err))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "55P03", "40001", "40P01":
			return fmt.Errorf("effects: %s: %s: %w: %w", op, pe.Code, fence.ErrBusy, err)
		}
	}
	return migrations.NotMigrated(o.schema, fmt.Errorf("effects: %s: %w", op, err))
}

func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}
