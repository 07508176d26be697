package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencekit/fencekit/sql/migrations"
)

func migrateCommands() []command {
	return []command{
		{group: "migrate", name: "up", summary: "apply the pending migrations (both sets by default)", timeout: DefaultTimeout,
			long: `Applies every pending migration of the chosen sets in one transaction
(sql/migrations.Migrate): idempotent, safe from several processes at once. The
schema is created when missing. The guard set belongs where the guard's marks
live, which may be another database: run it there with --set guard.`,
			setup: setupMigrateUp},
		{group: "migrate", name: "down", summary: "revert one set to a version (--to N; default one step)", timeout: DefaultTimeout,
			long: `Reverts the migrations of one set (--set lease or --set guard) recorded above
version N, newest first, in one transaction (sql/migrations.Down), running the
same down scripts the goose and golang-migrate files carry. Without --to it
reverts one version; --to 0 reverts the whole set.

Reverting destroys data: version 1 of the lease set drops every lease and the
token sequence (and with them the token order the guards rely on); later
versions drop columns that running processes use. Stop them first.`,
			setup: setupMigrateDown},
		{group: "migrate", name: "status", summary: "applied and pending versions per set", timeout: DefaultTimeout,
			long: `Lists, per set, the versions the schema records (whichever of fencekit, goose
or golang-migrate applied them), those this build would apply, and any this
build does not know (sql/migrations.Status). It only reads.`,
			setup: setupMigrateStatus},
		{group: "migrate", name: "validate", summary: "fail unless the schema has every migration this build needs", timeout: DefaultTimeout,
			long: `The startup check (sql/migrations.Validate): exits 1 and names the missing
versions when the schema lacks any migration of the chosen sets this build
embeds. It only reads.`,
			setup: setupMigrateValidate},
	}
}

// setFlag is --set: lease, guard, effects, mcp or all (default all, which
// is lease and guard; "lease,effects" too).
type setFlag struct {
	sets  []migrations.Set
	given bool
}

func (s *setFlag) String() string {
	if s == nil || len(s.sets) == 0 {
		return ""
	}
	parts := make([]string, len(s.sets))
	for i, v := range s.sets {
		parts[i] = string(v)
	}
	return strings.Join(parts, ",")
}

func (s *setFlag) Set(v string) error {
	var out []migrations.Set
	for _, p := range strings.Split(v, ",") {
		switch p = strings.TrimSpace(p); p {
		case "all":
			out = append(out, migrations.Lease, migrations.Guard)
		case string(migrations.Lease), string(migrations.Guard), string(migrations.Effects), string(migrations.MCP):
			out = append(out, migrations.Set(p))
		default:
			return fmt.Errorf("unknown migration set %q (want lease, guard, effects, mcp or all; all is lease and guard)", p)
		}
	}
	s.sets, s.given = dedupe(out), true
	return nil
}

func dedupe(sets []migrations.Set) []migrations.Set {
	var out []migrations.Set
	for _, s := range sets {
		dup := false
		for _, o := range out {
			dup = dup || o == s
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

func (s *setFlag) list() []migrations.Set {
	if !s.given {
		return []migrations.Set{migrations.Lease, migrations.Guard}
	}
	return s.sets
}

func registerSets(fs *flag.FlagSet, usage string) *setFlag {
	s := &setFlag{}
	fs.Var(s, "set", usage)
	return s
}

type setStatusJSON struct {
	Set     string        `json:"set"`
	Schema  string        `json:"schema"`
	Current int           `json:"current"`
	Applied []appliedJSON `json:"applied"`
	Pending []int         `json:"pending"`
	Unknown []int         `json:"unknown,omitempty"`
	Changed []int         `json:"changed,omitempty"` // up: applied now; down: reverted now
	action  string        // "up", "down" or "" (status)
}

type appliedJSON struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
}

func setStatus(schema string, st migrations.SetStatus) setStatusJSON {
	j := setStatusJSON{Set: string(st.Set), Schema: schema, Current: st.Current(), Applied: []appliedJSON{},
		Pending: st.Pending, Unknown: st.Unknown}
	if j.Pending == nil {
		j.Pending = []int{}
	}
	for _, a := range st.Applied {
		j.Applied = append(j.Applied, appliedJSON{Version: a.Version, Name: a.Name, AppliedAt: a.AppliedAt.UTC()})
	}
	return j
}

func versions(vs []int) string {
	if len(vs) == 0 {
		return "none"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%04d", v)
	}
	return strings.Join(parts, ", ")
}

func (j setStatusJSON) text(w io.Writer) {
	switch j.action {
	case "up":
		if len(j.Changed) == 0 {
			fmt.Fprintf(w, "%s set: up to date at version %04d (schema %s)\n", j.Set, j.Current, j.Schema)
		} else {
			fmt.Fprintf(w, "%s set: applied %s; now at version %04d (schema %s)\n", j.Set, versions(j.Changed), j.Current, j.Schema)
		}
		return
	case "down":
		if len(j.Changed) == 0 {
			fmt.Fprintf(w, "%s set: nothing to revert; at version %04d (schema %s)\n", j.Set, j.Current, j.Schema)
		} else {
			fmt.Fprintf(w, "%s set: reverted %s; now at version %04d (schema %s)\n", j.Set, versions(j.Changed), j.Current, j.Schema)
		}
		return
	}
	fmt.Fprintf(w, "%s set (schema %s): version %04d\n", j.Set, j.Schema, j.Current)
	for _, a := range j.Applied {
		fmt.Fprintf(w, "  applied  %04d_%s  %s\n", a.Version, a.Name, a.AppliedAt.Format(time.RFC3339))
	}
	for _, v := range j.Pending {
		fmt.Fprintf(w, "  pending  %04d\n", v)
	}
	for _, v := range j.Unknown {
		fmt.Fprintf(w, "  unknown  %04d (applied by a newer build)\n", v)
	}
}

func setupMigrateUp(fs *flag.FlagSet, _ *runner) runFunc {
	sets := registerSets(fs, "migration `SETS`: lease, guard or all (default all)")
	return func(ctx context.Context, r *runner, _ []string) error {
		p, err := r.database(ctx)
		if err != nil {
			return err
		}
		opts := migrations.Options{Schema: r.g.schemaName()}
		applied, err := migrations.Migrate(ctx, p, opts, sets.list()...)
		if err != nil {
			return err
		}
		st, err := migrations.Status(ctx, p, opts, sets.list()...)
		if err != nil {
			return err
		}
		for _, s := range st {
			j := setStatus(opts.Schema, s)
			j.action, j.Changed = "up", applied[s.Set]
			r.printer.print(j)
		}
		return nil
	}
}

// optionalInt is an int flag that knows whether it was given.
type optionalInt struct {
	v     int64
	given bool
}

func (o *optionalInt) String() string {
	if o == nil || !o.given {
		return ""
	}
	return fmt.Sprint(o.v)
}

func (o *optionalInt) Set(s string) error {
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil || fmt.Sprint(v) != strings.TrimPrefix(s, "+") {
		return fmt.Errorf("%q is not a whole number", s)
	}
	o.v, o.given = v, true
	return nil
}

func setupMigrateDown(fs *flag.FlagSet, _ *runner) runFunc {
	sets := registerSets(fs, "the one migration `SET` to revert: lease or guard (required)")
	var to optionalInt
	fs.Var(&to, "to", "revert down to version `N` (kept); 0 reverts the whole set (default: one version)")
	return func(ctx context.Context, r *runner, _ []string) error {
		if !sets.given || len(sets.sets) != 1 {
			return usagef("--set: name the one set to revert (lease or guard)")
		}
		set := sets.sets[0]
		if to.given && to.v < 0 {
			return usagef("--to %d: negative (0 reverts the whole set)", to.v)
		}
		if to.given && to.v > 1<<30 {
			return usagef("--to %d: not a version", to.v)
		}
		p, err := r.database(ctx)
		if err != nil {
			return err
		}
		opts := migrations.Options{Schema: r.g.schemaName()}
		target := int(to.v)
		if !to.given {
			st, err := migrations.Status(ctx, p, opts, set)
			if err != nil {
				return err
			}
			target = max(st[0].Current()-1, 0)
		}
		reverted, err := migrations.Down(ctx, p, opts, set, target)
		if err != nil {
			return err
		}
		st, err := migrations.Status(ctx, p, opts, set)
		if err != nil {
			return err
		}
		j := setStatus(opts.Schema, st[0])
		j.action, j.Changed = "down", reverted
		r.printer.print(j)
		return nil
	}
}

func setupMigrateStatus(fs *flag.FlagSet, _ *runner) runFunc {
	sets := registerSets(fs, "migration `SETS`: lease, guard or all (default all)")
	return func(ctx context.Context, r *runner, _ []string) error {
		p, err := r.database(ctx)
		if err != nil {
			return err
		}
		opts := migrations.Options{Schema: r.g.schemaName()}
		st, err := migrations.Status(ctx, p, opts, sets.list()...)
		if err != nil {
			return err
		}
		for _, s := range st {
			r.printer.print(setStatus(opts.Schema, s))
		}
		return nil
	}
}

type validateJSON struct {
	Schema  string           `json:"schema"`
	OK      bool             `json:"ok"`
	Missing map[string][]int `json:"missing,omitempty"`
}

func (v validateJSON) text(w io.Writer) {
	if v.OK {
		fmt.Fprintf(w, "schema %s has every migration this build needs\n", v.Schema)
		return
	}
	for _, s := range []migrations.Set{migrations.Lease, migrations.Guard, migrations.Effects} {
		if vs, ok := v.Missing[string(s)]; ok {
			fmt.Fprintf(w, "schema %s: %s set missing %s\n", v.Schema, s, versions(vs))
		}
	}
}

func setupMigrateValidate(fs *flag.FlagSet, _ *runner) runFunc {
	sets := registerSets(fs, "migration `SETS`: lease, guard or all (default all)")
	return func(ctx context.Context, r *runner, _ []string) error {
		p, err := r.database(ctx)
		if err != nil {
			return err
		}
		opts := migrations.Options{Schema: r.g.schemaName()}
		err = migrations.Validate(ctx, p, opts, sets.list()...)
		var ne *migrations.NotMigratedError
		switch {
		case err == nil:
			r.printer.print(validateJSON{Schema: opts.Schema, OK: true})
		case errors.As(err, &ne):
			v := validateJSON{Schema: opts.Schema, Missing: map[string][]int{}}
			for s, vs := range ne.Missing {
				v.Missing[string(s)] = vs
			}
			r.printer.print(v)
		}
		return err
	}
}
