package guardtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Subject is what the kit drives: a store whose writes are fenced.
//
// Write performs one guarded write of value to resource under token: it must
// store value (and remember token as the token that wrote it) only if the
// guard admits token, atomically with the admission. It returns nil when the
// write was accepted, an error matching fence.ErrStale (with a
// *fence.StaleError) when the token is below the resource's mark, an error
// matching fence.ErrBusy when nothing happened and a retry is worth it, and
// errors matching fence.ErrInvalidToken / fence.ErrInvalidResource for bad
// input.
//
// Read returns the current value of resource and the token of the write that
// stored it; found is false when nothing was ever accepted for resource.
type Subject interface {
	Write(ctx context.Context, resource string, token fence.Token, value string) error
	Read(ctx context.Context, resource string) (value string, token fence.Token, found bool, err error)
}

// FailingWriter is implemented by Subjects that can run a guarded write
// whose callback fails. WriteFailing must call the guard with token, have the
// write callback return a non-nil error, and return what the guard returned.
// Afterwards the stored value must be unchanged: a store that cannot roll
// back must fail the callback before it writes anything. The kit then checks
// that the mark was not raised.
type FailingWriter interface {
	WriteFailing(ctx context.Context, resource string, token fence.Token) error
}

// Config configures Run. Only New is required.
type Config struct {
	// New returns the Subject for one check. It is called once per check
	// (each in its own subtest); it may return the same store every time,
	// because every check uses resource names of its own.
	New func(t *testing.T) Subject

	// Writers is the number of concurrent goroutines in the concurrency
	// check. Default 8.
	Writers int
	// Rounds is the number of writes each writer attempts per resource in
	// the concurrency check. Default 25.
	Rounds int
	// Resources is the number of resources the concurrency check spreads
	// its writers over. Default 3.
	Resources int
	// Readers is the number of goroutines reading the resources while the
	// concurrency check's writers run. Default 2; negative means none.
	Readers int
	// FaultRounds is the number of rounds of tokens in the linearizability
	// check (checkLinearizable): each writer writes every resource once
	// per round, plus repeats. Default 6.
	FaultRounds int
	// FaultEvery makes about one write in FaultEvery of the
	// linearizability check a faulted one (held reply or delayed
	// duplicate), when the Subject offers the fault. Default 4.
	FaultEvery int
	// DeliveryDelay bounds how long the linearizability check keeps a
	// delayed write's first copy in transit when no other write completes
	// meanwhile (a store that serialises writes behind the held copy).
	// Default 200ms.
	DeliveryDelay time.Duration
	// SearchTimeout bounds the linearizability search of each resource's
	// history; a search that does not finish fails the check. Default 1
	// minute.
	SearchTimeout time.Duration
	// Prefix starts every resource name the kit uses. Default "guardtest/".
	// It must itself be acceptable in a resource name.
	Prefix string
	// BadResources are extra resource names the Subject must refuse with an
	// error matching fence.ErrInvalidResource, in addition to the names every
	// guard must refuse (see fence.ValidateResource).
	BadResources []string
	// Timeout bounds each check. Default 2 minutes.
	Timeout time.Duration
	// Logf, when set, receives a summary of the concurrency check (counts
	// of accepted, stale and busy writes). Run sets it to the subtest's
	// t.Logf when nil.
	Logf func(format string, args ...any)
	// Pending lists optional interfaces (InterfaceClaimWriter,
	// InterfaceContextWriter, InterfaceStrictWriter) that the Subject does
	// not implement yet. Run skips the checks needing a listed interface
	// the Subject lacks, and logs each skipped check and the reason; every
	// other check still runs. By default these interfaces are required: a
	// Subject lacking one fails the checks that need it. (FailingWriter
	// and OutcomeWriter stay optional: their checks are skipped, and
	// logged, when the Subject lacks them; so do DuplicateWriter and
	// Fencer.)
	Pending []string
}

// Defaults used by Config.
const (
	defaultWriters   = 8
	defaultRounds    = 25
	defaultResources = 3
	defaultReaders   = 2
	defaultPrefix    = "guardtest/"
	defaultTimeout   = 2 * time.Minute

	defaultFaultRounds   = 6
	defaultFaultEvery    = 4
	defaultDeliveryDelay = 200 * time.Millisecond
	defaultSearchTimeout = time.Minute
)

// ErrUnsupported is matched by the *unsupportedError a check returns when it
// needs an optional interface the Subject does not implement. Run fails or
// skips such a check (see Config.Pending).
var ErrUnsupported = errors.New("guardtest: subject does not support this check")

// WithDefaults validates cfg and returns a copy with defaults filled in.
// New may be nil here (the check functions do not use it); Run requires it.
func (cfg Config) WithDefaults() (Config, error) {
	if cfg.Writers == 0 {
		cfg.Writers = defaultWriters
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = defaultRounds
	}
	if cfg.Resources == 0 {
		cfg.Resources = defaultResources
	}
	if cfg.Readers == 0 {
		cfg.Readers = defaultReaders
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.FaultRounds == 0 {
		cfg.FaultRounds = defaultFaultRounds
	}
	if cfg.FaultEvery == 0 {
		cfg.FaultEvery = defaultFaultEvery
	}
	if cfg.DeliveryDelay == 0 {
		cfg.DeliveryDelay = defaultDeliveryDelay
	}
	if cfg.SearchTimeout == 0 {
		cfg.SearchTimeout = defaultSearchTimeout
	}
	switch {
	case cfg.Writers < 1 || cfg.Rounds < 1 || cfg.Resources < 1:
		return cfg, configErr("Writers, Rounds, Resources", "must be positive", nil)
	case cfg.FaultRounds < 1 || cfg.FaultEvery < 1:
		return cfg, configErr("FaultRounds, FaultEvery", "must be positive", nil)
	case cfg.Timeout < 0 || cfg.DeliveryDelay < 0 || cfg.SearchTimeout < 0:
		return cfg, configErr("Timeout, DeliveryDelay, SearchTimeout", "negative", nil)
	case fence.ValidateResource(cfg.Prefix+"x") != nil:
		return cfg, configErr("Prefix", fmt.Sprintf("%q does not make valid resource names", cfg.Prefix), nil)
	}
	for _, p := range cfg.Pending {
		if p != InterfaceClaimWriter && p != InterfaceContextWriter && p != InterfaceStrictWriter {
			return cfg, configErr("Pending", fmt.Sprintf("%q is not %q, %q or %q", p,
				InterfaceClaimWriter, InterfaceContextWriter, InterfaceStrictWriter), nil)
		}
	}
	return cfg, nil
}

// Check is one conformance check. Func returns nil when s passes, an error
// describing every violation otherwise, and ErrUnsupported when s lacks an
// optional interface the check needs. cfg must have defaults filled in.
type Check struct {
	Name string
	Func func(ctx context.Context, s Subject, cfg Config) error
}

// Checks returns every check Run performs, in order.
func Checks() []Check {
	return []Check{
		{"FirstWriteAccepted", checkFirstWrite},
		{"HigherAccepted", checkHigher},
		{"EqualAccepted", checkEqual},
		{"StaleRejected", checkStale},
		{"InvalidTokensRejected", checkInvalidTokens},
		{"InvalidResourcesRejected", checkInvalidResources},
		{"FailedWriteKeepsMark", checkFailedWrite},
		{"ConcurrentHistory", CheckConcurrent},
		{"EndedContextRefused", checkEndedContext},
		{"EndedContextRefusedContextForm", checkEndedContextForm},
		{"NoTokenRefused", checkNoToken},
		{"ContextFormMatchesWrite", checkContextForm},
		{"TokenReuseRefused", checkTokenReuse},
		{"OutcomeUnknownReported", checkOutcomeUnknown},
		{"DelayedDuplicateNotApplied", checkDelayedDuplicate},
		{"LinearizableUnderFaults", checkLinearizable},
		{"StrictScopeRefused", checkStrictScope},
		{"FenceCallbackCarriesClaim", checkFenceClaim},
		{"FenceOnMissingResource", checkFenceMissing},
	}
}

// Run runs every check in Checks as a subtest of t, each against a Subject
// from cfg.New. A check needing an optional interface the Subject lacks
// fails, unless the interface is FailingWriter or listed in cfg.Pending: then
// the check is skipped, and Run logs it (in the subtest and in a summary
// on t) with the reason.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.New == nil {
		t.Fatalf("guardtest: Config.New is nil")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var skipped []string
	defer func() {
		if len(skipped) > 0 {
			t.Logf("guardtest: %d check(s) skipped: %s", len(skipped), strings.Join(skipped, "; "))
		}
	}()
	for _, c := range Checks() {
		t.Run(c.Name, func(t *testing.T) {
			s := cfg.New(t)
			if s == nil {
				t.Fatalf("guardtest: Config.New returned nil")
			}
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
			defer cancel()
			ccfg := cfg
			if ccfg.Logf == nil {
				ccfg.Logf = t.Logf
			}
			err := c.Func(ctx, s, ccfg)
			iface, req := cfg.required(err)
			switch {
			case iface != "" && req:
				t.Errorf("%v: the check %s needs it (list %q in Config.Pending to skip it while it is not implemented)", err, c.Name, iface)
			case iface != "":
				why := "not implemented"
				if slices.Contains(cfg.Pending, iface) {
					why = "listed in Config.Pending"
				}
				skipped = append(skipped, fmt.Sprintf("%s (no guardtest.%s: %s)", c.Name, iface, why))
				t.Skipf("skipped: %v (%s)", err, why)
			case errors.Is(err, ErrUnsupported):
				t.Skip(err)
			case err != nil:
				t.Error(err)
			}
		})
	}
}

// resourceName returns a resource name no other check or run uses.
func resourceName(cfg Config, check string, i int) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%s/%s/%d", cfg.Prefix, check, hex.EncodeToString(b[:]), i)
}

// expectState reads resource and compares with the wanted state.
func expectState(ctx context.Context, s Subject, resource string, want resState, when string) error {
	v, tok, found, err := s.Read(ctx, resource)
	if err != nil {
		return fmt.Errorf("%s: Read(%q): %w", when, resource, err)
	}
	got := resState{Value: v, Token: tok, Found: found}
	if !found {
		got = resState{}
	}
	if got != want {
		return fmt.Errorf("%s: Read(%q) = %s, want %s", when, resource, got, want)
	}
	return nil
}

// resState is a resource's stored value and the token that wrote it.
type resState struct {
	Value string
	Token fence.Token
	Found bool
}

// String formats s for messages.
func (s resState) String() string {
	if !s.Found {
		return "not found"
	}
	return fmt.Sprintf("{value %q, token %d}", s.Value, s.Token)
}

func found(v string, t fence.Token) resState { return resState{Value: v, Token: t, Found: true} }

// configErr is the *fence.ConfigError of a guardtest Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "guardtest", Field: field, Reason: reason, Err: err}
}
