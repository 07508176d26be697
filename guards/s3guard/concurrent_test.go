package s3guard

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
)

// TestConcurrentWriters: 16 writers, each with its own client (as separate
// processes), write one key with interleaved tokens. The key ends in the
// state of the highest accepted token, every refusal names a higher token,
// and no data object is left behind besides the current one. It runs with
// the pointer cache on, one Guard per writer ("cache") and four Guards
// shared by four writers each ("cache-shared", so one cache sees concurrent
// updates), and with the cache off ("nocache").
func TestConcurrentWriters(t *testing.T) {
	forEachKind(t, func(t *testing.T, kind clientKind) {
		for _, mode := range []struct {
			name      string
			cacheSize int
			stores    int
		}{{"cache", 0, 16}, {"cache-shared", 0, 4}, {"nocache", -1, 16}} {
			t.Run(mode.name, func(t *testing.T) { testConcurrentWriters(t, newEnv(t, kind), mode.cacheSize, mode.stores) })
		}
	})
}

func testConcurrentWriters(t *testing.T, e env, cacheSize, nstores int) {
	const writers, rounds = 16, 8
	const key = "contended"
	stores := make([]*Guard, nstores)
	for i := range stores {
		stores[i] = e.store(t, e.newClient(t, nil), func(c *Config) { c.MaxAttempts = 100; c.PointerCacheSize = cacheSize })
	}

	type result struct {
		tok   fence.Token
		value string
		err   error
	}
	results := make(chan result, writers*rounds)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		s := stores[w%nstores]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				// Tokens rise over rounds and overlap between writers that
				// run at different speeds: 3r+1 .. 3r+4.
				tok := fence.Token(3*r + 1 + (w*7)%4)
				v := fmt.Sprintf("w%d-r%d-t%d", w, r, tok)
				_, err := s.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), tok)), key, []byte(v), PutOptions{})
				results <- result{tok, v, err}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(results)

	var maxTok fence.Token
	accepted := map[string]fence.Token{}
	var stale, busy int
	for r := range results {
		switch se, isStale := fence.IsStale(r.err); {
		case r.err == nil:
			accepted[r.value] = r.tok
			maxTok = max(maxTok, r.tok)
		case isStale:
			stale++
			assert.Equal(t, r.tok, se.Presented)
			assert.Greater(t, se.Highest, se.Presented)
		case errors.Is(r.err, fence.ErrBusy):
			busy++
		default:
			t.Errorf("unexpected error: %v", r.err)
		}
	}
	t.Logf("%d accepted, %d stale, %d busy", len(accepted), stale, busy)
	require.NotEmpty(t, accepted)
	assert.Positive(t, stale, "interleaved tokens must produce refusals")

	s := e.store(t, nil, nil)
	got, info := content(t, s, key)
	assert.Equal(t, maxTok, info.Token, "final token is the highest accepted")
	assert.Equal(t, maxTok, accepted[got], "final content %q was written by the highest token", got)
	assert.ElementsMatch(t, []string{key, info.DataKey}, e.listAll(t),
		"refused writers and superseded content leave no data objects")
}
