package pgbouncer

import (
	"context"
	"testing"
)

// TestStartRejectsBadConfig: a bad config is refused before anything is
// started.
func TestStartRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{UpstreamHost: "127.0.0.1", UpstreamPort: 5432, User: "postgres", Mode: "statement"},
		{UpstreamHost: "127.0.0.1", UpstreamPort: 5432, Mode: ModeSession},
	} {
		if s, err := Start(context.Background(), cfg, "test"); err == nil {
			_ = s.Stop()
			t.Fatalf("Start(%+v) succeeded", cfg)
		}
	}
}
