package gcsguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestConcurrentIndependentClients: writers on independent clients (own
// connections) race on one key with interleaved tokens; every accepted
// write must be at or above the highest token accepted before it started,
// and the final object is the highest token's.
func TestConcurrentIndependentClients(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	bucket := e.bucket(t)
	const writers, rounds, key = 6, 12, "race/one"
	stores := make([]*Guard, writers)
	for i := range stores {
		stores[i] = e.store(t, bucket, Config{MaxAttempts: 100})
	}
	var (
		mu       sync.Mutex
		highest  fence.Token // highest token whose acceptance has completed
		accepted = map[fence.Token]int{}
		bad      []string
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for w := range writers {
		wg.Go(func() {
			<-start
			for r := range rounds {
				tok := fence.Token(1 + r*writers + (w*5)%writers) // interleaved, each token once
				mu.Lock()
				floor := highest
				mu.Unlock()
				_, err := stores[w].Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), key, strings.NewReader(fmt.Sprint(tok)), int64(len(fmt.Sprint(tok))), PutOptions{})
				mu.Lock()
				switch {
				case err == nil:
					if tok < floor {
						bad = append(bad, fmt.Sprintf("token %d accepted after %d had been", tok, floor))
					}
					accepted[tok]++
					highest = max(highest, tok)
				case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrBusy):
				default:
					bad = append(bad, fmt.Sprintf("token %d: %v", tok, err))
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d violations: %v", len(bad), bad)
	}
	b, info, err := stores[0].GetBytes(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Token != highest || string(b) != fmt.Sprint(highest) {
		t.Fatalf("final %q token %d, highest accepted %d", b, info.Token, highest)
	}
	t.Logf("%d writers x %d rounds: %d accepted, highest %d", writers, rounds, len(accepted), highest)
}

// TestConcurrentReuse: two runs present the same token at once; exactly one
// run's writes are accepted, the other's are refused as reuses.
func TestConcurrentReuse(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	bucket := e.bucket(t)
	const key = "race/reuse"
	runs := []string{"run-a", "run-b"}
	var wg sync.WaitGroup
	results := make([][]error, len(runs))
	start := make(chan struct{})
	for i, run := range runs {
		s := e.store(t, bucket, Config{MaxAttempts: 100})
		wg.Go(func() {
			<-start
			for range 5 {
				_, err := s.Put(fence.WithClaim(ctx, fence.Claim{Token: 40, Run: run}), key, strings.NewReader(run), int64(len(run)), PutOptions{})
				results[i] = append(results[i], err)
			}
		})
	}
	close(start)
	wg.Wait()
	b, info, err := e.store(t, bucket, Config{}).GetBytes(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	winner := info.Run
	if string(b) != winner {
		t.Fatalf("content %q from run %q", b, winner)
	}
	for i, run := range runs {
		// The first accepted write fixes the mark's run: every write of
		// the winner is accepted, every write of the other is a reuse.
		for _, err := range results[i] {
			if run == winner && err != nil {
				t.Errorf("winner %s: %v", run, err)
			}
			if run != winner && !errors.Is(err, fence.ErrTokenReused) {
				t.Errorf("loser %s: %v, want ErrTokenReused", run, err)
			}
		}
	}
	// Once the mark's run is set, the other run's write is refused.
	other := runs[0]
	if other == winner {
		other = runs[1]
	}
	_, err = e.store(t, bucket, Config{}).Put(fence.WithClaim(ctx, fence.Claim{Token: 40, Run: other}), key, strings.NewReader("x"), int64(len("x")), PutOptions{})
	if re, ok := fence.IsReused(err); !ok || re.MarkRun != winner {
		t.Fatalf("after the race: %v", err)
	}
}
