package redisguard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// defaultAddr is used when TEST_REDIS_ADDR is unset.
const defaultAddr = "127.0.0.1:6379"

// missing fails the test under CI (CI=true or 1) and skips it otherwise.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (start it with `make services` and export TEST_REDIS_ADDR)"
	if v := strings.ToLower(os.Getenv("CI")); v == "true" || v == "1" {
		t.Fatalf("required service missing under CI: %s", msg)
	}
	t.Skip(msg)
}

// redisAddr returns TEST_REDIS_ADDR or defaultAddr.
func redisAddr() string {
	if a := os.Getenv("TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return defaultAddr
}

// newClient returns a new, independent client (own pool) to addr, closed
// when the test ends; opts adjusts its options.
func newClient(t testing.TB, addr string, opts func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, PoolSize: 4}
	if opts != nil {
		opts(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		missing(t, "Redis at %s unreachable: %v", addr, err)
	}
	return c
}

// space is a private key space for one test: a resource prefix and a mark
// prefix of its own, whose keys are deleted when the test ends.
type space struct {
	resources, marks string
}

func newSpace(t testing.TB) space {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s := space{resources: "fktest-" + id + "/", marks: "fktest-" + id + ":mark:"}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: redisAddr()})
		defer func() { _ = c.Close() }()
		ctx := context.Background()
		for _, pat := range []string{s.resources + "*", s.marks + "*", "*" + s.resources + "*"} {
			iter := c.Scan(ctx, 0, pat, 500).Iterator()
			for iter.Next(ctx) {
				_ = c.Del(ctx, iter.Val()).Err()
			}
		}
	})
	return s
}

// guard returns a Guard on a new client with the space's mark prefix.
func (s space) guard(t testing.TB, cfg Config) *Guard {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = newClient(t, redisAddr(), nil)
	}
	if cfg.MarkPrefix == "" {
		cfg.MarkPrefix = s.marks
	}
	g, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
