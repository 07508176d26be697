package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease/leaseops"
)

// DefaultPruneBatches bounds the statements of one "marks prune".
const DefaultPruneBatches = 100

func housekeepingCommands() []command {
	return []command{
		{group: "janitor", name: "sweep", summary: "delete lease rows released or expired long ago", timeout: DefaultTimeout,
			long: fmt.Sprintf(`Deletes lease rows whose expiry (the release time for released rows) is older
than --older-than, in bounded batches (leaseops.Janitor.Sweep). Rows are kept
that long so that a statement that drew its token before a later grant cannot
insert a smaller one; --older-than must be at least %s and at least %d times
--statement-bound (the longest an acquire statement can run: the larger of the
Managers' CallTimeout and the role's statement_timeout).`, leaseops.MinRetention, leaseops.RetentionFactor),
			setup: setupSweep},
		{group: "marks", name: "highest", summary: "the highest token any guard mark holds", timeout: DefaultTimeout,
			long: `Prints the highest token the PostgreSQL guard's marks hold
(pgguard.Marks.Highest): the floor source that "floor check --marks-url" reads.
--database-url and --schema name the marks' database and schema.`,
			setup: setupHighest},
		{group: "marks", name: "prune", summary: "delete marks idle longer than --older-than", timeout: DefaultTimeout,
			long: fmt.Sprintf(`Deletes the guard marks no write has raised or re-used for longer than
--older-than (at least %s), in batches (pgguard.Marks.DeleteIdle).
--database-url and --schema name the marks' database and schema.

A deleted mark forgets the highest token its resource accepted: a holder paused
longer than --older-than could write to it again. Prune only with an idle time
far beyond any pause, and run "fencekit floor check" first (deleted marks no
longer count as a floor source).`, pgguard.MinMarkIdle),
			setup: setupPrune},
	}
}

type sweepJSON struct {
	Schema    string `json:"schema"`
	OlderThan string `json:"older_than"`
	Deleted   int64  `json:"deleted"`
	Batches   int    `json:"batches"`
	More      bool   `json:"more"`
}

func (j sweepJSON) text(w io.Writer) {
	more := ""
	if j.More {
		more = "; more remain (run it again)"
	}
	fmt.Fprintf(w, "deleted %d lease row(s) older than %s from schema %s in %d batch(es)%s\n", j.Deleted, j.OlderThan, j.Schema, j.Batches, more)
}

func setupSweep(fs *flag.FlagSet, _ *runner) runFunc {
	older := fs.Duration("older-than", leaseops.DefaultRetention, "delete rows expired or released longer ago than `D`")
	bound := fs.Duration("statement-bound", 0, "the longest an acquire statement can run (default the library's CallTimeout, 5s)")
	return func(ctx context.Context, r *runner, _ []string) error {
		cfg, err := r.dbConfig("", "")
		if err != nil {
			return err
		}
		p, err := r.pool(ctx, cfg)
		if err != nil {
			return err
		}
		j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: p, Schema: r.g.schemaName(), Retention: *older,
			StatementBound: *bound, Interval: 24 * time.Hour})
		if err != nil {
			return usagef("%v", err)
		}
		r.onClose(func() { _ = j.Close() })
		if err := ping(ctx, p, "lease database"); err != nil {
			return err
		}
		res, err := j.Sweep(ctx)
		if err != nil {
			return err
		}
		r.printer.print(sweepJSON{Schema: r.g.schemaName(), OlderThan: j.Retention().String(),
			Deleted: res.Deleted, Batches: res.Batches, More: res.More})
		return nil
	}
}

// marks opens the marks in --database-url/--schema. No I/O.
func (r *runner) marks(ctx context.Context) (*pgguard.Marks, error) {
	cfg, err := r.dbConfig("", "")
	if err != nil {
		return nil, err
	}
	p, err := r.pool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return pgguard.NewMarks(pgguard.MarksConfig{DB: p, Schema: r.g.schemaName()})
}

type highestJSON struct {
	Schema  string `json:"schema"`
	Highest int64  `json:"highest"`
}

func (j highestJSON) text(w io.Writer) {
	fmt.Fprintf(w, "highest token in the marks of schema %s: %d\n", j.Schema, j.Highest)
}

func setupHighest(*flag.FlagSet, *runner) runFunc {
	return func(ctx context.Context, r *runner, _ []string) error {
		m, err := r.marks(ctx)
		if err != nil {
			return err
		}
		if err := ping(ctx, r.pools[0], "marks database"); err != nil {
			return err
		}
		h, err := m.Highest(ctx)
		if err != nil {
			return err
		}
		r.printer.print(highestJSON{Schema: r.g.schemaName(), Highest: int64(h)})
		return nil
	}
}

type pruneJSON struct {
	Schema    string `json:"schema"`
	OlderThan string `json:"older_than"`
	Deleted   int64  `json:"deleted"`
	Batches   int    `json:"batches"`
	More      bool   `json:"more"`
}

func (j pruneJSON) text(w io.Writer) {
	more := ""
	if j.More {
		more = "; more remain (run it again)"
	}
	fmt.Fprintf(w, "deleted %d mark(s) idle longer than %s from schema %s in %d batch(es)%s\n", j.Deleted, j.OlderThan, j.Schema, j.Batches, more)
}

func setupPrune(fs *flag.FlagSet, _ *runner) runFunc {
	older := fs.Duration("older-than", 0, fmt.Sprintf("delete marks idle longer than `D`, at least %s (required)", pgguard.MinMarkIdle))
	batch := fs.Int("batch", pgguard.MaxMarksBatch, fmt.Sprintf("marks per statement, 1..%d", pgguard.MaxMarksBatch))
	batches := fs.Int("max-batches", DefaultPruneBatches, "most statements to send")
	return func(ctx context.Context, r *runner, _ []string) error {
		switch {
		case *older == 0:
			return usagef("--older-than is required (at least %s)", pgguard.MinMarkIdle)
		case *older < pgguard.MinMarkIdle:
			return usagef("--older-than %s: below the minimum %s", *older, pgguard.MinMarkIdle)
		case *batch < 1 || *batch > pgguard.MaxMarksBatch:
			return usagef("--batch %d: want 1..%d", *batch, pgguard.MaxMarksBatch)
		case *batches < 1:
			return usagef("--max-batches %d: want at least 1", *batches)
		}
		m, err := r.marks(ctx)
		if err != nil {
			return err
		}
		if err := ping(ctx, r.pools[0], "marks database"); err != nil {
			return err
		}
		res := pruneJSON{Schema: r.g.schemaName(), OlderThan: older.String()}
		for res.Batches < *batches {
			n, err := m.DeleteIdle(ctx, *older, *batch)
			if err != nil {
				return err
			}
			res.Batches++
			res.Deleted += n
			if n < int64(*batch) {
				break
			}
			res.More = res.Batches == *batches
		}
		r.printer.print(res)
		return nil
	}
}
