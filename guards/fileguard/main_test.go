//go:build unix

package fileguard

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newGuard(t testing.TB, dir string, cfg Config) *Guard {
	t.Helper()
	cfg.Dir = dir
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
