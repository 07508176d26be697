package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

const floorSourcesHelp = `Floor sources (check and advance need at least one; status reads them when given):
  --marks-url URL --marks-schema S  the PostgreSQL guard's marks, in a database
        that survived the failover or restore (marks replicated or restored along
        with the lease database are as old as its sequence)
  --floor N   a floor the operator keeps outside the lease database (0..2^53);
        --floor 0 says explicitly that only the floor stored in the schema counts`

const patroniHelp = `As a Patroni callback (callbacks: on_role_change: fencekit floor check ...),
the command takes Patroni's three arguments ACTION ROLE CLUSTER after its flags:
it runs only when ROLE is primary (or master) and exits 0 otherwise. It retries,
until --timeout (default 2m), while the database does not accept writes yet
(SQLSTATE 25006, "recovery is in progress", starting up, connection refused),
printing each wait on stderr.`

func floorCommands() []command {
	return []command{
		{group: "floor", name: "status", summary: "stored floor, next token, checked node, this node; are grants refused", timeout: DefaultTimeout,
			long: `Shows the lease schema's token floor state without changing anything
(leaseops.TokenFloor.Status): the floor stored in the schema, the next token the
sequence will issue, the node the floor was last checked on, the node this runs
on, and whether grants are refused there (and why). It works on a standby too.
With a floor source it also reads the source and says whether a check would pass.

` + floorSourcesHelp,
			setup: setupFloorStatus},
		{group: "floor", name: "check", args: "[ACTION ROLE CLUSTER]", maxPos: 3,
			summary: "check the sequence against the floor; records this node when above it", timeout: DefaultFloorTimeout,
			long: `Compares the token sequence with the floor (the larger of the sources and the
floor stored in the schema) in one statement (leaseops.TokenFloor.Check): raises
the stored floor to the sources' value and, when the next token is above it,
records this node as checked — grants refused since a promotion or restore
resume at once. When the sequence is not above the floor it exits 3 and records
nothing: grants stay refused until "fencekit floor advance". Run it as the
schema owner, after every failover or restore (and at any time: it is cheap and
harmless).

` + floorSourcesHelp + `

` + patroniHelp,
			setup: setupFloorRun(false)},
		{group: "floor", name: "advance", args: "[ACTION ROLE CLUSTER]", maxPos: 3,
			summary: "move the sequence above the floor and record this node (the recovery)", timeout: DefaultFloorTimeout,
			long: `The whole recovery after a failover or restore in one command
(leaseops.CheckFloor): raises the stored floor to the largest of --floor and
the marks, moves the token sequence above it when it is behind (never
backwards) and records this node as checked, in one statement that briefly
locks the lease table when it moves the sequence. Grants resume at its commit, above every token
the sources know. Safe to run again. Run it as the schema owner.

` + floorSourcesHelp + `

` + patroniHelp,
			setup: setupFloorRun(true)},
	}
}

// floorFlag is --floor: an operator floor in 0..MaxFloor.
type floorFlag struct {
	v     fence.Token
	given bool
}

func (f *floorFlag) String() string {
	if f == nil || !f.given {
		return ""
	}
	return fmt.Sprint(int64(f.v))
}

func (f *floorFlag) Set(s string) error {
	v, err := parseFloor("--floor", s)
	if err != nil {
		return err
	}
	f.v, f.given = v, true
	return nil
}

// floorSources are the floor commands' source flags.
type floorSources struct {
	marksURL, marksSchema string
	floor                 floorFlag
}

func (s *floorSources) register(fs *flag.FlagSet) {
	fs.StringVar(&s.marksURL, "marks-url", "", "connection string `URL` of the database holding the guard's marks (one that survived)")
	fs.StringVar(&s.marksSchema, "marks-schema", "", "schema `NAME` of the guard's marks (default \"public\")")
	fs.Var(&s.floor, "floor", "operator floor `N`, 0..2^53: every token issued from now on is above it")
}

func (s *floorSources) given() bool { return s.marksURL != "" || s.marksSchema != "" || s.floor.given }

// marks validates the marks flags and returns the marks' reader, or nil
// without --marks-url. No I/O.
func (s *floorSources) marks(ctx context.Context, r *runner) (*pgguard.Marks, error) {
	if s.marksURL == "" {
		if s.marksSchema != "" {
			return nil, usagef("--marks-schema needs --marks-url (the database holding the marks)")
		}
		return nil, nil
	}
	schema := s.marksSchema
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateIdentifier(schema); err != nil {
		return nil, usagef("--marks-schema: %v", err)
	}
	cfg, err := r.dbConfig("--marks-url", s.marksURL)
	if err != nil {
		return nil, err
	}
	p, err := r.pool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return pgguard.NewMarks(pgguard.MarksConfig{DB: p, Schema: schema})
}

// source is the FloorSource of the given flags: the larger of the marks'
// highest token and --floor (StaticFloor(0) when neither is given).
func (s *floorSources) source(marks *pgguard.Marks) lease.FloorSource {
	var srcs []lease.FloorSource
	if marks != nil {
		srcs = append(srcs, marks.Highest)
	}
	return lease.MaxFloor(append(srcs, lease.StaticFloor(s.floor.v))...)
}

// tokenFloor validates every flag of a floor command and returns the
// library object the command calls. No I/O.
func (s *floorSources) tokenFloor(ctx context.Context, r *runner) (*leaseops.TokenFloor, *pgxpool.Pool, *pgguard.Marks, error) {
	cfg, err := r.dbConfig("", "")
	if err != nil {
		return nil, nil, nil, err
	}
	marks, err := s.marks(ctx, r)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := r.pool(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	tf, err := leaseops.NewTokenFloor(leaseops.TokenFloorConfig{Pool: p, Schema: r.g.schemaName(), Source: s.source(marks)})
	return tf, p, marks, err
}

type floorStatusJSON struct {
	Schema        string     `json:"schema"`
	StoredFloor   int64      `json:"stored_floor"`
	UpdatedAt     *time.Time `json:"stored_floor_updated_at,omitempty"`
	NextToken     int64      `json:"next_token"`
	CheckedNode   string     `json:"checked_node"`
	Node          string     `json:"node"`
	InRecovery    bool       `json:"in_recovery"`
	GrantsRefused bool       `json:"grants_refused"`
	Refusal       string     `json:"refusal,omitempty"`
	SourceFloor   *int64     `json:"source_floor,omitempty"`
	CheckWould    string     `json:"check_would,omitempty"` // "pass" or "fail", with a source
}

func (j floorStatusJSON) text(w io.Writer) {
	fmt.Fprintf(w, "schema:        %s\n", j.Schema)
	fmt.Fprintf(w, "stored floor:  %d\n", j.StoredFloor)
	fmt.Fprintf(w, "next token:    %d\n", j.NextToken)
	if j.SourceFloor != nil {
		fmt.Fprintf(w, "source floor:  %d (a check would %s)\n", *j.SourceFloor, j.CheckWould)
	}
	checked := j.CheckedNode
	if checked == "" {
		checked = "(never)"
	}
	fmt.Fprintf(w, "checked node:  %s\n", checked)
	node := j.Node
	if j.InRecovery {
		node = "(a standby, in recovery)"
	}
	fmt.Fprintf(w, "this node:     %s\n", node)
	if j.GrantsRefused {
		fmt.Fprintf(w, "grants:        REFUSED: %s\n", j.Refusal)
	} else {
		fmt.Fprintf(w, "grants:        allowed\n")
	}
}

func setupFloorStatus(fs *flag.FlagSet, _ *runner) runFunc {
	var src floorSources
	src.register(fs)
	return func(ctx context.Context, r *runner, _ []string) error {
		tf, p, marks, err := src.tokenFloor(ctx, r)
		if err != nil {
			return err
		}
		if err := ping(ctx, p, "lease database"); err != nil {
			return err
		}
		st, err := tf.Status(ctx)
		if err != nil {
			return err
		}
		j := floorStatusJSON{Schema: r.g.schemaName(), StoredFloor: int64(st.Stored), NextToken: int64(st.Next),
			CheckedNode: st.CheckedNode, Node: st.Node, InRecovery: st.InRecovery}
		if !st.UpdatedAt.IsZero() {
			u := st.UpdatedAt.UTC()
			j.UpdatedAt = &u
		}
		if refused := st.Refused(); refused != nil {
			j.GrantsRefused, j.Refusal = true, refused.Error()
		}
		if src.given() {
			v, err := src.source(marks)(ctx)
			if err != nil {
				return fmt.Errorf("reading the floor source: %w", err)
			}
			sv := int64(v)
			j.SourceFloor, j.CheckWould = &sv, "fail"
			if st.Next > max(st.Stored, v) {
				j.CheckWould = "pass"
			}
		}
		r.printer.print(j)
		return nil
	}
}

type floorReportJSON struct {
	Schema      string `json:"schema"`
	Command     string `json:"command"` // check or advance
	OK          bool   `json:"ok"`
	NextToken   int64  `json:"next_token"`
	StoredFloor int64  `json:"stored_floor"`
	SourceFloor int64  `json:"source_floor"`
	Floor       int64  `json:"floor"`
	Node        string `json:"node"`
	CheckedNode string `json:"checked_node"`
	Attempts    int    `json:"attempts"`
	WaitedMS    int64  `json:"waited_ms"`
	TookMS      int64  `json:"took_ms"`
}

func (j floorReportJSON) text(w io.Writer) {
	if j.OK {
		fmt.Fprintf(w, "floor %s passed on node %s: next token %d is above the floor %d (stored %d, sources %d); grants allowed (took %s, %d attempt(s))\n",
			j.Command, j.Node, j.NextToken, j.Floor, j.StoredFloor, j.SourceFloor, time.Duration(j.TookMS)*time.Millisecond, j.Attempts)
		return
	}
	fmt.Fprintf(w, "floor %s FAILED on node %s: next token %d is not above the floor %d (stored %d, sources %d); grants stay refused: run 'fencekit floor advance' with the same sources\n",
		j.Command, j.Node, j.NextToken, j.Floor, j.StoredFloor, j.SourceFloor)
}

type skippedJSON struct {
	Skipped bool   `json:"skipped"`
	Action  string `json:"action"`
	Role    string `json:"role"`
	Cluster string `json:"cluster"`
}

func (j skippedJSON) text(w io.Writer) {
	fmt.Fprintf(w, "nothing to do: %s for role %s of cluster %s (the floor is checked on a primary only)\n", j.Action, j.Role, j.Cluster)
}

// floorCall is the one library call behind "floor check" and "floor
// advance", both the schema's fencekit_check_floor. check is
// TokenFloor.Check: it records the node only when the sequence is already
// above the floor, and never moves the sequence.
// advance is leaseops.CheckFloor, the privilege-safe function a Manager
// with lease.Config.Floor runs by itself: it raises the floor to the
// sources' value, moves the sequence past it when behind and records the
// node; any role with EXECUTE on fencekit_check_floor may run it.
func floorCall(ctx context.Context, tf *leaseops.TokenFloor, pool *pgxpool.Pool, schema string, source lease.FloorSource, advance bool) (leaseops.FloorReport, error) {
	if advance {
		return leaseops.CheckFloor(ctx, pool, schema, lease.FloorConfig{Source: source})
	}
	return tf.Check(ctx)
}

func setupFloorRun(advance bool) func(fs *flag.FlagSet, r *runner) runFunc {
	return func(fs *flag.FlagSet, _ *runner) runFunc {
		var src floorSources
		src.register(fs)
		return func(ctx context.Context, r *runner, pos []string) error {
			name := "check"
			if advance {
				name = "advance"
			}
			if len(pos) != 0 && len(pos) != 3 {
				return usagef("want no arguments, or Patroni's ACTION ROLE CLUSTER; got %d argument(s)", len(pos))
			}
			if !src.given() {
				return usagef("name a floor source: --marks-url URL [--marks-schema S] (the guards' marks in a database that survived) and/or --floor N (0: the stored floor only)")
			}
			tf, pool, marks, err := src.tokenFloor(ctx, r)
			if err != nil {
				return err
			}
			if len(pos) == 3 && pos[1] != "primary" && pos[1] != "master" {
				r.printer.print(skippedJSON{Skipped: true, Action: pos[0], Role: pos[1], Cluster: pos[2]})
				return nil
			}
			start := time.Now()
			var (
				rep      leaseops.FloorReport
				attempts int
				waited   time.Duration
			)
			backoff := 100 * time.Millisecond
			for {
				attempts++
				rep, err = floorCall(ctx, tf, pool, r.g.schemaName(), src.source(marks), advance)
				if err == nil || !retryable(err) || ctx.Err() != nil {
					break
				}
				r.warnf("the lease database does not accept writes yet (attempt %d: %v); retrying in %s", attempts, err, backoff)
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return fmt.Errorf("%w (after %d attempts; last: %w)", context.Cause(ctx), attempts, err)
				case <-t.C:
				}
				waited += backoff
				backoff = min(2*backoff, 2*time.Second)
			}
			j := floorReportJSON{Schema: r.g.schemaName(), Command: name, OK: err == nil,
				NextToken: int64(rep.Next), StoredFloor: int64(rep.Stored), SourceFloor: int64(rep.Source),
				Floor: int64(max(rep.Floor(), src.floor.v)), Node: rep.Node, CheckedNode: rep.CheckedNode,
				Attempts: attempts, WaitedMS: waited.Milliseconds(), TookMS: time.Since(start).Milliseconds()}
			if err != nil && rep.Node == "" {
				return err // nothing was read: no report to show
			}
			r.printer.print(j)
			if err != nil {
				return fmt.Errorf("%w; grants stay refused: run 'fencekit floor advance' with the same sources", err)
			}
			return nil
		}
	}
}

// parseFloor reads an operator floor: a decimal integer in 0..MaxFloor.
func parseFloor(flagName, s string) (fence.Token, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, usagef("%s %q: not a whole number in 0..%d", flagName, s, int64(MaxFloor))
	case v < 0:
		return 0, usagef("%s %d: negative (a floor is 0 or more)", flagName, v)
	case v > int64(MaxFloor):
		return 0, usagef("%s %d: absurd, above %d (2^53, the largest integer every JSON reader keeps exact; at a million grants a second the sequence would take 285 years to get there)", flagName, v, int64(MaxFloor))
	}
	return fence.Token(v), nil
}

// MaxFloor is the largest operator floor the floor commands accept.
const MaxFloor = fence.Token(1 << 53)
