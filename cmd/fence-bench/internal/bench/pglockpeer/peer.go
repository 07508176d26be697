package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cirello.io/pglock"
)

// cycler runs pglock lock cycles on one client.
type cycler struct {
	client  *pglock.Client
	workers int
}

func newCycler(db *sql.DB, table string, workers int) (*cycler, error) {
	if workers < 1 {
		return nil, fmt.Errorf("workers must be at least 1, got %d", workers)
	}
	c, err := pglock.New(db, pglock.WithCustomTable(table))
	if err != nil {
		return nil, err
	}
	return &cycler{client: c, workers: workers}, nil
}

// cycles runs the workers for d and returns the cycles completed and the
// time taken, or the first error.
func (c *cycler) cycles(ctx context.Context, d time.Duration) (int, time.Duration, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	t0 := time.Now()
	stop := t0.Add(d)
	var wg sync.WaitGroup
	for w := range c.workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				l, err := c.client.AcquireContext(ctx, fmt.Sprintf("w%d-%d", w, i%64), pglock.FailIfLocked())
				if err == nil {
					err = c.client.ReleaseContext(ctx, l)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, 0, err
	}
	return int(n.Load()), time.Since(t0), nil
}

// serve answers the commands read from r on w until quit or the end of r.
func serve(r io.Reader, w io.Writer, run func(time.Duration) (int, time.Duration, error)) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var reply string
		switch {
		case len(f) == 1 && f[0] == "quit":
			return nil
		case len(f) == 2 && f[0] == "run":
			ns, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || ns <= 0 {
				reply = "err bad duration " + strconv.Quote(f[1])
				break
			}
			n, el, err := run(time.Duration(ns))
			if err != nil {
				reply = "err " + strings.ReplaceAll(err.Error(), "\n", " ")
				break
			}
			reply = fmt.Sprintf("ok %d %d", n, el.Nanoseconds())
		default:
			reply = "err unknown command " + strconv.Quote(sc.Text())
		}
		if _, err := fmt.Fprintln(w, reply); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("standard input closed without quit")
}
