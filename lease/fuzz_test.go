package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Lease keys come from outside (the account and session ids of a client
// request). These fuzz targets check Key.Validate against its documented
// rules and that every key it accepts round-trips through PostgreSQL.

func keySeeds(f *testing.F) {
	for _, s := range [][2]string{
		{"acct", "sess"}, {"", "s"}, {"a", ""}, {"a\x00b", "s"}, {"a", "\n"}, {"\u0085", "s"}, {"\xff", "s"},
		{strings.Repeat("a", lease.MaxIDLen), "s"}, {strings.Repeat("é", 129), "s"}, {"'; DROP TABLE fencekit_leases; --", `"x"`},
		{"ü/ñ", "会话"}, {"\u2028", "s"}, {"\U0010FFFF", "s"},
	} {
		f.Add(s[0], s[1])
	}
}

func validID(s string) bool {
	if s == "" || len(s) > lease.MaxIDLen || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

// FuzzKeyValidate: Validate accepts exactly non-empty, at most MaxIDLen
// bytes of UTF-8 without control characters, refuses everything else with a
// *KeyError matching ErrInvalidKey, and never panics.
func FuzzKeyValidate(f *testing.F) {
	keySeeds(f)
	f.Fuzz(func(t *testing.T, account, session string) {
		k := lease.Key{AccountID: account, SessionID: session}
		err := k.Validate()
		want := validID(account) && validID(session)
		if want != (err == nil) {
			t.Fatalf("Validate(%q, %q) = %v, want valid=%v", account, session, err, want)
		}
		if err != nil {
			var ke *lease.KeyError
			if !errors.As(err, &ke) || !errors.Is(err, lease.ErrInvalidKey) {
				t.Fatalf("refusal %T %v is not a *KeyError matching ErrInvalidKey", err, err)
			}
			if ke.Field != "AccountID" && ke.Field != "SessionID" {
				t.Fatalf("KeyError.Field %q", ke.Field)
			}
		}
		_ = k.String() // must not panic on any input
	})
}

// FuzzKeyRoundTrip: every key Validate accepts can be acquired, is stored
// verbatim (Inspect returns it and the grant), and can be released; every
// key it refuses sends nothing.
func FuzzKeyRoundTrip(f *testing.F) {
	keySeeds(f)
	schema := fencetest.Schema(f, migrations.Lease)
	m, err := lease.New(lease.Config{Pool: fencetest.Pool(f), Schema: schema, TTL: 10 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = m.Close() })
	f.Fuzz(func(t *testing.T, account, session string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		k := lease.Key{AccountID: account, SessionID: session}
		l, err := m.Acquire(ctx, k)
		if k.Validate() != nil {
			if !errors.Is(err, lease.ErrInvalidKey) {
				t.Fatalf("invalid key %q acquired: %v", k, err)
			}
			return
		}
		if errors.Is(err, lease.ErrHeld) {
			return // the fuzzer repeated a key within its TTL
		}
		if err != nil {
			t.Fatalf("valid key %q refused: %v", k, err)
		}
		st, err := m.Inspect(ctx, k)
		if err != nil || st.Key != k || st.RunID != l.RunID() || st.Token != l.Token() || !st.Held() {
			t.Fatalf("Inspect(%q) = %+v, %v; want the grant %s", k, st, err, l)
		}
		if _, err := l.Release(ctx); err != nil {
			t.Fatalf("release %q: %v", k, err)
		}
	})
}
