package bench

import (
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// takeoverWorkers is the number of concurrent workers of the takeover case;
// each takes its own key over again and again.
const takeoverWorkers = cycleWorkers

// Takeover measures Manager.Takeover of a key another Manager holds, the
// "continue here" path: worker w alternates between two Managers on its
// own key, so every takeover displaces a live holder (the statement
// records the displaced run and notifies; the other Manager's listener
// ends that lease). It alternates round by round with the lease side of the
// lease cycle (Acquire + Release on distinct keys by as many workers) and
// reports takeovers per second and their ratio to lease cycles per second,
// each the median over rounds with its spread.
func Takeover(e *Env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	pool, err := e.pool(takeoverWorkers, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx := e.Ctx
	var ms [2]*lease.Manager
	for i := range ms {
		if ms[i], err = lease.New(lease.Config{Pool: pool, Schema: schema}); err != nil {
			return err
		}
		defer ms[i].Close()
	}
	key := func(prefix string, w, i int) lease.Key {
		return lease.Key{AccountID: "a", SessionID: fmt.Sprintf("%s%d-%d", prefix, w, i)}
	}
	sides := []Side{
		{Name: "takeover", Run: func(d time.Duration) (int, time.Duration, error) {
			return Parallel(takeoverWorkers, d, func(w, i int) error {
				_, err := ms[i%2].Takeover(ctx, key("t", w, 0))
				return err
			})
		}},
		{Name: "lease", Run: func(d time.Duration) (int, time.Duration, error) {
			return Parallel(takeoverWorkers, d, func(w, i int) error {
				l, err := ms[0].Acquire(ctx, key("c", w, i%64))
				if err != nil {
					return err
				}
				_, err = l.Release(ctx)
				return err
			})
		}},
	}
	rounds, dur, warm := e.cycleRounds()
	res, err := Alternate(sides, rounds, dur, warm)
	if err != nil {
		return err
	}
	how := fmt.Sprintf("%d workers, each taking its own key over from the other of two Managers; %d rounds x %v per side, order rotated", takeoverWorkers, rounds, dur)
	s := res.Ratio("takeover", "lease")
	e.Report.Add(Metric{Key: "takeover_ratio_vs_lease_cycle", Value: s.Median, Unit: "x", Note: "Manager.Takeover of a live holder vs Acquire+Release; " + how, Spread: &s})
	r := res.Rate("takeover")
	e.Report.Add(Metric{Key: "takeovers_per_s", Value: r.Median, Unit: "1/s", Spread: &r})
	c := res.Rate("lease")
	e.Report.Add(Metric{Key: "takeover_case_lease_cycles_per_s", Value: c.Median, Unit: "1/s", Note: "the lease side of this case", Spread: &c})
	return nil
}
