package lease_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// BenchmarkCycle is one lease cycle, Manager.Acquire + Lease.Release of a
// free key (manager), by one caller cycling over 64 keys (so every acquire
// after the first 64 takes the ON CONFLICT path, as in fence-bench's
// lease_cycle case), and the same two statements sent with pgx directly
// (statements: the Manager's own work is the difference). ns/op is the
// round trips plus the client's work; allocs/op and B/op are the client's
// alone, and user-ns/op and sys-ns/op are the process's CPU time per cycle
// (getrusage): the client's work, the Manager's background loops
// included, in Go (user) and in the kernel's socket calls (sys)
// (docs/performance.md, "Where the lease cycle's time goes").
func BenchmarkCycle(b *testing.B) {
	fencetest.SkipShort(b)
	for _, mode := range []lease.RenewalMode{lease.RenewalHeartbeat, lease.RenewalPerLease} {
		b.Run(mode.String(), func(b *testing.B) {
			pool := fencetest.Pool(b)
			m, err := lease.New(lease.Config{Pool: pool, Schema: fencetest.Schema(b, migrations.Lease), Renewal: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = m.Close() }()
			ctx := bg()
			b.Run("manager", func(b *testing.B) {
				cycles(b, func(k lease.Key) error {
					l, err := m.Acquire(ctx, k)
					if err != nil {
						return err
					}
					if res, err := l.Release(ctx); err != nil || res != lease.ReleaseDone {
						return fmt.Errorf("release: %v %w", res, err)
					}
					return nil
				})
			})
			b.Run("statements", func(b *testing.B) {
				cycle, err := lease.StatementCycle(ctx, m)
				if err != nil {
					b.Fatal(err)
				}
				cycles(b, cycle)
			})
		})
	}
}

// cycles runs cycle over 64 keys, one cycle per iteration, and reports
// the process's CPU time per cycle.
func cycles(b *testing.B, cycle func(lease.Key) error) {
	keys := make([]lease.Key, 64)
	for i := range keys {
		keys[i] = lease.Key{AccountID: "bench", SessionID: fmt.Sprintf("s%d", i)}
	}
	b.ReportAllocs()
	user0, sys0 := processCPU(b)
	i := 0
	for b.Loop() {
		if err := cycle(keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	user, sys := processCPU(b)
	b.ReportMetric(float64(user-user0)/float64(b.N), "user-ns/op")
	b.ReportMetric(float64(sys-sys0)/float64(b.N), "sys-ns/op")
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
