package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// StormKeys are the storm case's metrics.
var StormKeys = []string{"storm_told_p50_ms", "storm_told_p99_ms", "storm_told_max_ms"}

// Storm measures how soon a displaced holder is told in a takeover storm
// (heartbeat mode): stormManagers new Managers take stormKeys keys over from
// each other stormRounds times each, as fast as they can, so that many
// takeovers land while the displaced grant's own reply is in flight and the
// first ones while the Managers are new. For every displaced holder, the
// delay from the later of its own grant's return and the displacing
// takeover's return to the end of its lease (Done, observed by a goroutine
// per lease: the figure includes that goroutine's wake-up). Each storm gives
// a p50, p99 and max; the metrics are the median p50 and p99 over the storms
// and the largest max, each with its spread over the storms.
func Storm(e *Env) error {
	const stormManagers, stormKeys, stormRounds = 8, 4, 120
	storms := 5
	if e.Quick {
		storms = 2
	}
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	pool, err := e.pool(2*stormManagers, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	var p50s, p99s, maxes []float64
	n := 0
	for s := range storms {
		ds, err := storm(e, pool, schema, stormManagers, stormKeys, stormRounds)
		if err != nil {
			return fmt.Errorf("storm %d: %w", s, err)
		}
		slices.Sort(ds)
		q := func(p float64) float64 { return Ms(ds[int(p*float64(len(ds)-1))]) }
		p50s, p99s, maxes = append(p50s, q(0.5)), append(p99s, q(0.99)), append(maxes, q(1))
		n = len(ds)
		e.logf("storm %d: %d displaced holders told: p50 %.2f ms, p99 %.2f ms, max %.2f ms", s, len(ds), q(0.5), q(0.99), q(1))
	}
	how := fmt.Sprintf("%d new Managers (heartbeat mode) each taking over %d keys in turn %d times; %d storms of %d displaced holders; delay from the later of the displaced grant's and the takeover's return to the displaced lease's end",
		stormManagers, stormKeys, stormRounds, storms, n)
	p50, p99, mx := Summarize(p50s), Summarize(p99s), Summarize(maxes)
	e.Report.Add(Metric{Key: "storm_told_p50_ms", Value: p50.Median, Unit: "ms", Note: "median over storms; " + how, Spread: &p50})
	e.Report.Add(Metric{Key: "storm_told_p99_ms", Value: p99.Median, Unit: "ms", Target: 50, Cmp: AtMost, Note: "median over storms", Spread: &p99})
	e.Report.Add(Metric{Key: "storm_told_max_ms", Value: mx.Max, Unit: "ms", Target: 250, Cmp: AtMost, Note: "largest over storms", Spread: &mx})
	return nil
}

// storm runs one storm on Managers of its own and returns every displaced
// holder's delay.
func storm(e *Env, pool *pgxpool.Pool, schema string, managers, keys, rounds int) ([]time.Duration, error) {
	ms := make([]*lease.Manager, managers)
	for i := range ms {
		m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: 10 * time.Second, RenewEvery: 3 * time.Second, Renewal: lease.RenewalHeartbeat})
		if err != nil {
			return nil, err
		}
		defer m.Close()
		ms[i] = m
	}
	acct := uuid.NewString()
	type grant struct {
		l        *lease.Lease
		returned time.Time
		ended    chan time.Time
	}
	var (
		mu  sync.Mutex
		all []*grant
		wg  sync.WaitGroup
	)
	errs := make(chan error, managers)
	for w, m := range ms {
		wg.Go(func() {
			for i := range rounds {
				l, err := m.Takeover(e.Ctx, lease.Key{AccountID: acct, SessionID: strconv.Itoa((w + i) % keys)})
				if err != nil {
					errs <- err
					return
				}
				g := &grant{l: l, returned: time.Now(), ended: make(chan time.Time, 1)}
				go func() {
					<-l.Done()
					g.ended <- time.Now()
				}()
				mu.Lock()
				all = append(all, g)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	byKey := map[lease.Key][]*grant{}
	for _, g := range all {
		byKey[g.l.Key()] = append(byKey[g.l.Key()], g)
	}
	var delays []time.Duration
	for _, gs := range byKey {
		slices.SortFunc(gs, func(a, b *grant) int { return int(a.l.Token() - b.l.Token()) })
		for i, g := range gs[:len(gs)-1] {
			var ended time.Time
			select {
			case ended = <-g.ended:
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("a displaced holder (token %d) was not told within 10 s", g.l.Token())
			}
			if !errors.Is(g.l.Err(), lease.ErrTakenOver) {
				return nil, fmt.Errorf("a displaced holder (token %d) ended with %w, not ErrTakenOver", g.l.Token(), g.l.Err())
			}
			from := g.returned
			if next := gs[i+1].returned; next.After(from) {
				from = next
			}
			delays = append(delays, max(ended.Sub(from), 0))
		}
	}
	if len(delays) == 0 {
		return nil, errors.New("no displaced holder")
	}
	return delays, nil
}
