package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// TestCloseDuringTraffic: Close races with Acquire, Release, Renew,
// AcquireWait and Run on the same Manager. Every call returns, no goroutine
// outlives Close (goleak in TestMain), and afterwards no row is left held:
// a grant that completes after Close is released before Acquire returns
// ErrClosed.
func TestCloseDuringTraffic(t *testing.T) {
	e := newEnv(t)
	pool := fencetest.Pool(t)
	for iter := range 15 {
		m, err := lease.New(lease.Config{Pool: pool, Schema: e.schema, TTL: 2 * time.Second, RenewEvery: 50 * time.Millisecond, WaitPoll: 100 * time.Millisecond})
		require.NoError(t, err)
		acct := uuid.NewString()
		k := func(i int) lease.Key { return lease.Key{AccountID: acct, SessionID: strconv.Itoa(i % 4)} }
		ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					var err error
					switch (w + i) % 4 {
					case 0:
						var l *lease.Lease
						if l, err = m.Acquire(ctx, k(i)); err == nil {
							if _, err = l.Renew(ctx); err == nil {
								_, err = l.Release(ctx)
							}
						}
					case 1:
						var l *lease.Lease
						wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
						if l, err = m.AcquireWait(wctx, k(i)); err == nil {
							_, err = l.Release(ctx)
						}
						wcancel()
					case 2:
						err = m.Run(ctx, k(i), func(ctx context.Context, l *lease.Lease) error { return nil })
					case 3:
						_, err = m.Inspect(ctx, k(i))
					}
					switch {
					case err == nil, errors.Is(err, lease.ErrHeld), errors.Is(err, context.DeadlineExceeded),
						errors.Is(err, lease.ErrReleased), errors.Is(err, lease.ErrLost):
					case errors.Is(err, lease.ErrClosed):
						return
					default:
						errs <- fmt.Errorf("iteration %d worker %d: %w", iter, w, err)
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+iter*7) * time.Millisecond) // let traffic build up; not a synchronisation
		require.NoError(t, m.Close())
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		var held int
		require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(
			`SELECT count(*) FROM %[1]q.fencekit_leases l WHERE account_id = $1 AND released_at IS NULL
  AND CASE WHEN expires_at = 'infinity' -- a heartbeat row is live while its epoch is
    THEN EXISTS (SELECT 1 FROM %[1]q.fencekit_managers hb WHERE hb.manager_id = l.manager_id AND hb.expires_at > clock_timestamp())
    ELSE expires_at > clock_timestamp() END`, e.schema),
			acct).Scan(&held))
		require.Zero(t, held, "iteration %d: rows left held after Close", iter)
	}
}
