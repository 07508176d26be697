package fence

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAccepts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Token
	}{
		{"1", 1},
		{"42", 42},
		{"9223372036854775807", math.MaxInt64},
		{"1000000000000000000", 1_000_000_000_000_000_000},
	} {
		got, err := Parse(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.Equal(t, tc.in, got.String())
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"", "0", "00", "007", "-1", "+1", " 1", "1 ", "1\n", "0x10", "1e3", "1.0",
		"9223372036854775808", "18446744073709551615", "18446744073709551616",
		"99999999999999999999", "١٢٣", "１２", "1\x00", "abc", "--1", "1_000",
	} {
		_, err := Parse(in)
		require.Error(t, err, "%q", in)
		assert.ErrorIs(t, err, ErrInvalidToken, "%q", in)
		var pe *ParseError
		assert.True(t, errors.As(err, &pe), "%q", in)
	}
}

func TestValidateAndText(t *testing.T) {
	assert.ErrorIs(t, Token(0).Validate(), ErrInvalidToken)
	assert.ErrorIs(t, Token(-5).Validate(), ErrInvalidToken)
	assert.NoError(t, Token(5).Validate())
	_, err := Token(0).MarshalText()
	assert.ErrorIs(t, err, ErrInvalidToken)
	b, err := Token(77).MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "77", string(b))
	var tok Token = 9
	assert.ErrorIs(t, tok.UnmarshalText([]byte("-3")), ErrInvalidToken)
	assert.Equal(t, Token(9), tok, "failed unmarshal must not change the value")
	require.NoError(t, tok.UnmarshalText([]byte("12")))
	assert.Equal(t, Token(12), tok)
}

func TestContext(t *testing.T) {
	_, ok := FromContext(context.Background())
	assert.False(t, ok)
	ctx := WithToken(context.Background(), 31)
	got, ok := FromContext(ctx)
	assert.True(t, ok)
	assert.Equal(t, Token(31), got)
	_, ok = FromContext(WithToken(context.Background(), 0))
	assert.False(t, ok, "an invalid token in ctx is reported as absent")
}

func TestDecide(t *testing.T) {
	assert.NoError(t, Decide("r", 5, 4))
	assert.NoError(t, Decide("r", 5, 5))
	assert.NoError(t, Decide("r", 1, 0))
	err := Decide("r", 3, 5)
	require.ErrorIs(t, err, ErrStale)
	se, ok := IsStale(err)
	require.True(t, ok)
	assert.Equal(t, Token(3), se.Presented)
	assert.Equal(t, Token(5), se.Highest)
	assert.Equal(t, "r", se.Resource)
	assert.NotErrorIs(t, err, ErrBusy)
	_, ok = IsStale(ErrBusy)
	assert.False(t, ok)
}

func TestValidateResource(t *testing.T) {
	assert.NoError(t, ValidateResource("reports/2026/a.json"))
	assert.NoError(t, ValidateResource("ünïcode"))
	for _, bad := range []string{"", "a\x00b", "a\nb", "\x7f", string([]byte{0xff, 0xfe}), string(make([]byte, MaxResourceLen+1))} {
		assert.ErrorIs(t, ValidateResource(bad), ErrInvalidResource, "%q", bad)
	}
	assert.ErrorIs(t, CheckArgs("ok", 0), ErrInvalidToken)
	assert.ErrorIs(t, CheckArgs("", 1), ErrInvalidResource)
	assert.NoError(t, CheckArgs("ok", 1))
}

// FuzzParse checks that Parse accepts exactly the canonical decimal form of
// positive int64 values and that accepted input round-trips.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "+1", "007", "9223372036854775807", "9223372036854775808", " 1", "0x1", "١", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		ref, refErr := strconv.ParseInt(s, 10, 64)
		canonical := refErr == nil && ref > 0 && strconv.FormatInt(ref, 10) == s
		if canonical != (err == nil) {
			t.Fatalf("Parse(%q) err=%v, canonical=%v", s, err, canonical)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error %v does not match ErrInvalidToken", err)
			}
			if !utf8.ValidString(err.Error()) && utf8.ValidString(s) {
				t.Fatalf("error text not UTF-8")
			}
			return
		}
		if tok.String() != s || int64(tok) != ref {
			t.Fatalf("round trip %q -> %d -> %q", s, tok, tok.String())
		}
	})
}
