package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/integration/history"
)

// procConfig is what one process (the parent or a child) needs to run its
// executions. Children receive it as JSON.
type procConfig struct {
	Seed      uint64        `json:"seed"`
	Prefix    string        `json:"prefix"` // execution ids are Prefix + "x" + n
	Execs     int           `json:"execs"`
	Duration  time.Duration `json:"duration"`
	Sessions  int           `json:"sessions"`
	PerKind   int           `json:"per_kind"`
	PGURL     string        `json:"pg_url"` // through the proxy
	S3        s3Endpoint    `json:"s3"`     // through the proxy
	Bucket    string        `json:"bucket"`
	Schema    string        `json:"schema"`
	HTTPURL   string        `json:"http_url"`
	TTL       time.Duration `json:"ttl"`
	Margin    time.Duration `json:"margin"`
	Lease     string        `json:"lease"`
	Faults    []Fault       `json:"faults"`
	Guards    []string      `json:"guards"`
	Overtrust time.Duration `json:"overtrust"`
}

type s3Endpoint struct {
	Endpoint, AccessKey, SecretKey string
}

// Keys returns the lease keys of a run with n sessions.
func keysFor(n int) []Key {
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = Key{Account: "chaos", Session: fmt.Sprintf("s%d", i)}
	}
	return keys
}

func resourceName(k Key, kind string, i int) string {
	return fmt.Sprintf("%s/%s-%d", k.Session, kind, i)
}

// leaserFactory builds a Leaser over pool for one execution.
type leaserFactory func(pool *pgxpool.Pool, pc procConfig) (Leaser, error)

var (
	leasersMu sync.Mutex
	leasers   = map[string]leaserFactory{
		"reference": func(pool *pgxpool.Pool, pc procConfig) (Leaser, error) {
			return newRefLeaser(pool, pc.Schema, pc.TTL, pc.Margin, 0)
		},
		// overtrust: the reference lease, broken on purpose: it trusts a
		// lease for Overtrust past its expiry. Used to prove the checker
		// catches a broken lease end to end.
		"overtrust": func(pool *pgxpool.Pool, pc procConfig) (Leaser, error) {
			return newRefLeaser(pool, pc.Schema, pc.TTL, pc.Margin, pc.Overtrust)
		},
	}
)

func registerLeaser(name string, f leaserFactory) {
	leasersMu.Lock()
	defer leasersMu.Unlock()
	leasers[name] = f
}

func leaserFor(name string) (leaserFactory, bool) {
	leasersMu.Lock()
	defer leasersMu.Unlock()
	f, ok := leasers[name]
	return f, ok
}

// procRun holds one process's executions and what they share.
type procRun struct {
	execs   []*execution
	pools   []*pgxpool.Pool
	closers []interface{ Close() error }
	tr      *http.Transport
}

func (p *procRun) close() {
	for _, c := range p.closers {
		_ = c.Close()
	}
	for _, pool := range p.pools {
		pool.Close()
	}
	if p.tr != nil {
		p.tr.CloseIdleConnections()
	}
}

// newProcRun builds pc.Execs executions recording into rec.
func newProcRun(ctx context.Context, pc procConfig, rec *history.Recorder) (*procRun, error) {
	factory, ok := leaserFor(pc.Lease)
	if !ok {
		return nil, fmt.Errorf("chaos: unknown lease implementation %q", pc.Lease)
	}
	faults := NewFaultSet(pc.Faults...)
	pr := &procRun{tr: http.DefaultTransport.(*http.Transport).Clone()}
	pr.tr.MaxIdleConnsPerHost = 16
	ok = false
	defer func() {
		if !ok {
			pr.close()
		}
	}()
	mc, err := minio.New(pc.S3.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(pc.S3.AccessKey, pc.S3.SecretKey, ""),
		Transport: dropTransport{base: pr.tr},
	})
	if err != nil {
		return nil, err
	}
	store, err := s3guard.New(s3guard.Config{Client: minioclient.New(mc), Bucket: pc.Bucket})
	if err != nil {
		return nil, err
	}
	httpClient := &http.Client{Transport: &httpguard.Transport{Base: dropTransport{base: pr.tr}}, Timeout: 10 * time.Second}
	drop := func(ctx context.Context) context.Context { c, _ := withDroppedReply(ctx); return c }
	guards := map[string]bool{}
	for _, g := range pc.Guards {
		guards[g] = true
	}
	keys := keysFor(pc.Sessions)
	for i := 0; i < pc.Execs; i++ {
		cfg, err := pgxpool.ParseConfig(pc.PGURL)
		if err != nil {
			return nil, err
		}
		dropper := &commitDropper{}
		cfg.ConnConfig.DialFunc = dropper.dial
		cfg.MaxConns = 2
		cfg.ConnConfig.ConnectTimeout = 3 * time.Second
		// Bound every statement on the server too, so a held connection
		// cannot pin a row lock for long.
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = "5000"
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = "2000"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		pr.pools = append(pr.pools, pool)
		l, err := factory(pool, pc)
		if err != nil {
			return nil, err
		}
		if c, ok := l.(interface{ Close() error }); ok {
			pr.closers = append(pr.closers, c)
		}
		pgt, err := newPGTarget(pool, pc.Schema)
		if err != nil {
			return nil, err
		}
		s3t := &s3Target{s: store}
		ht := &httpTarget{client: httpClient, url: pc.HTTPURL, pool: pool, schema: pc.Schema}
		res := map[Key][]resource{}
		for _, k := range keys {
			for j := 0; j < pc.PerKind; j++ {
				if guards[GuardPG] {
					res[k] = append(res[k], resource{name: resourceName(k, GuardPG, j), t: pgt})
				}
				if guards[GuardS3] {
					res[k] = append(res[k], resource{name: resourceName(k, GuardS3, j), t: s3t, drop: drop})
				}
				if guards[GuardHTTP] {
					res[k] = append(res[k], resource{name: resourceName(k, GuardHTTP, j), t: ht, drop: drop})
				}
			}
		}
		pr.execs = append(pr.execs, &execution{
			id:        fmt.Sprintf("%sx%d", pc.Prefix, i),
			rng:       rand.New(rand.NewPCG(pc.Seed, uint64(i)+1)),
			rec:       rec,
			leaser:    l,
			keys:      keys,
			resources: res,
			ttl:       pc.TTL,
			faults:    faults,
			pgDrop:    dropper,
		})
	}
	ok = true
	return pr, nil
}

// run runs every execution until ctx ends and waits for them.
func (p *procRun) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, x := range p.execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.run(ctx)
		}()
	}
	wg.Wait()
}
