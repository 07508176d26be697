package natsguard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// defaultURL is used when TEST_NATS_URL is unset.
const defaultURL = "nats://127.0.0.1:4222"

func natsURL() string {
	if u := os.Getenv("TEST_NATS_URL"); u != "" {
		return u
	}
	return defaultURL
}

// missing fails the test under CI (CI=true or 1) and skips it otherwise.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (start it with `make services` and export TEST_NATS_URL)"
	if v := strings.ToLower(os.Getenv("CI")); v == "true" || v == "1" {
		t.Fatalf("required service missing under CI: %s", msg)
	}
	t.Skip(msg)
}

// connect opens a new, independent connection to url (closed when the
// test ends) and its JetStream context.
func connect(t testing.TB, url string, jsOpts []jetstream.JetStreamOpt, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(5 * time.Second)}, opts...)...)
	if err != nil {
		missing(t, "NATS at %s unreachable: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jsOpts...)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// newBucket creates a bucket of its own (deleted when the test ends).
func newBucket(t testing.TB, cfg jetstream.KeyValueConfig) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	cfg.Bucket = "fktest_" + hex.EncodeToString(b[:])
	if cfg.History == 0 {
		cfg.History = 4
	}
	js := connect(t, natsURL(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc, err := nats.Connect(natsURL())
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteKeyValue(context.Background(), cfg.Bucket)
		}
	})
	return cfg.Bucket
}

// guard returns a Guard on a new connection over bucket.
func guard(t testing.TB, bucket string, cfg Config) *Guard {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = connect(t, natsURL(), nil)
	}
	cfg.Bucket = bucket
	g, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
