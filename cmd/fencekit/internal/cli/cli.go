package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/fencekit/fencekit/sql/migrations"
)

// Env is what Main needs from its process; arguments go separately.
type Env struct {
	Stdout, Stderr io.Writer
	// Getenv reads environment variables (os.Getenv in main).
	Getenv func(string) string
}

// runFunc runs a command with its positional arguments.
type runFunc func(ctx context.Context, r *runner, pos []string) error

// command is one "<group> <name>" command.
type command struct {
	group, name string
	args        string // positional arguments, for the usage line
	minPos      int    // fewest positional arguments
	maxPos      int    // most positional arguments
	summary     string
	long        string
	// timeout is the default deadline of the whole command when --timeout
	// is not given; 0 means none (watch).
	timeout time.Duration
	// setup registers the command's flags and returns its run function.
	setup func(fs *flag.FlagSet, r *runner) runFunc
}

func (c command) path() string { return c.group + " " + c.name }

// DefaultTimeout is the deadline of a command when --timeout is not given,
// except for the floor check and advance (DefaultFloorTimeout) and watch
// (none).
const DefaultTimeout = 30 * time.Second

// DefaultFloorTimeout is the deadline of floor check and floor advance
// when --timeout is not given: it includes waiting for a promoted standby
// to accept writes.
const DefaultFloorTimeout = 2 * time.Minute

var groups = []struct{ name, summary string }{
	{"migrate", "apply, revert and inspect the lease and guard schema migrations"},
	{"floor", "token floor after a failover or restore: status, check, advance"},
	{"leases", "list, inspect, revoke and watch leases"},
	{"janitor", "delete old lease rows"},
	{"marks", "the PostgreSQL guard's marks: highest token, prune idle ones"},
	{"effects", "the effects outbox: list, retry, cancel"},
}

func commands() []command {
	var cs []command
	cs = append(cs, migrateCommands()...)
	cs = append(cs, floorCommands()...)
	cs = append(cs, leasesCommands()...)
	cs = append(cs, housekeepingCommands()...)
	cs = append(cs, effectsCommands()...)
	return cs
}

const exitCodesHelp = `Exit codes:
  0  ok
  1  failure: the database cannot be reached, a statement failed, the schema
     is not migrated (validate); the cause is printed
  2  usage or bad input (unknown command or flag, malformed identifier, URL,
     duration, key, run id, negative or absurd floor): nothing was changed
  3  refused as unsafe: the floor check failed (the token sequence is not above
     the floor) and grants stay refused until "fencekit floor advance"
`

const globalFlagsHelp = `Global flags (before or after the command):
  --database-url URL   PostgreSQL connection string (default $DATABASE_URL)
  --schema NAME        schema of the lease tables, or of the guard's marks for
                       "marks" and "migrate --set guard" (default "public")
  --json               one JSON object per line on stdout
  --timeout D          deadline of the whole command (default 30s; floor
                       check/advance 2m, waiting for writes; watch: none)
  --help               help for any command
`

func usage(w io.Writer) {
	fmt.Fprint(w, `fencekit operates fencekit's PostgreSQL schema: migrations, the token floor
after a failover or restore, leases and housekeeping.

Usage:
  fencekit <group> <command> [flags] [arguments]
  fencekit <group> <command> --help
  fencekit version

Commands:
`)
	for _, g := range groups {
		var names []string
		for _, c := range commands() {
			if c.group == g.name {
				names = append(names, c.name)
			}
		}
		fmt.Fprintf(w, "  %-8s %-34s %s\n", g.name, strings.Join(names, " | "), g.summary)
	}
	fmt.Fprint(w, "\n"+globalFlagsHelp+"\n"+exitCodesHelp)
}

func groupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "Usage: fencekit %s <command> [flags]\n\nCommands:\n", group)
	for _, c := range commands() {
		if c.group == group {
			fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, "\nRun 'fencekit %s <command> --help' for a command's flags.\n", group)
}

// Main runs fencekit with args (without the program name) and returns the
// process exit code: ExitOK, ExitFailed, ExitUsage or ExitRefused. Errors
// are printed to env.Stderr as one "fencekit <command>: …" line (and, with
// --json, as a final {"error": …} object on env.Stdout).
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	words, rest := splitCommand(args)
	jsonOut := hasJSONFlag(rest)
	fail := func(prefix string, err error) int {
		code := ExitCode(err)
		msg := oneLine(err.Error())
		fmt.Fprintf(env.Stderr, "%s: %s\n", prefix, msg)
		if jsonOut {
			writeJSON(env.Stdout, errorJSON{Error: msg, ExitCode: code})
		}
		return code
	}
	if len(words) == 0 {
		if hasHelpFlag(rest) {
			usage(env.Stdout)
			return ExitOK
		}
		usage(env.Stderr)
		return fail("fencekit", checkRootFlags(rest))
	}
	if words[0] == "help" {
		if len(words) > 1 {
			return Main(ctx, append(words[1:], "--help"), env)
		}
		usage(env.Stdout)
		return ExitOK
	}
	if words[0] == "version" {
		return printVersion(env, jsonOut)
	}
	known := false
	for _, g := range groups {
		known = known || g.name == words[0]
	}
	if !known {
		return fail("fencekit", usagef("unknown command %q (run 'fencekit --help')", words[0]))
	}
	if len(words) == 1 {
		if hasHelpFlag(rest) {
			groupUsage(env.Stdout, words[0])
			return ExitOK
		}
		groupUsage(env.Stderr, words[0])
		return fail("fencekit "+words[0], usagef("missing command"))
	}
	for _, c := range commands() {
		if c.group == words[0] && c.name == words[1] {
			return runCommand(ctx, c, rest, env, fail)
		}
	}
	return fail("fencekit "+words[0], usagef("unknown command %q (run 'fencekit %s --help')", words[1], words[0]))
}

func runCommand(ctx context.Context, c command, args []string, env Env, fail func(string, error) int) int {
	r := &runner{env: env, cmd: c}
	fs := flag.NewFlagSet(c.path(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	r.g.register(fs)
	run := c.setup(fs, r)
	prefix := "fencekit " + c.path()
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		commandHelp(env.Stdout, c, fs)
		return ExitOK
	}
	if err != nil {
		return fail(prefix, usagef("%s (run '%s --help')", flagError(fs, err), prefix))
	}
	r.printer = printer{w: env.Stdout, json: r.g.json}
	if len(pos) < c.minPos || len(pos) > c.maxPos {
		want := "no arguments"
		if c.args != "" {
			want = c.args
		}
		return fail(prefix, usagef("want %s, got %d argument(s) (run '%s --help')", want, len(pos), prefix))
	}
	if r.g.timeout < 0 {
		return fail(prefix, usagef("--timeout %s: negative", r.g.timeout))
	}
	if err := migrations.ValidateIdentifier(r.g.schemaName()); err != nil {
		return fail(prefix, usagef("--schema: %v", err))
	}
	timeout := r.g.timeout
	if timeout == 0 {
		timeout = c.timeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w after %s (--timeout)", errTimedOut, timeout))
		defer cancel()
	}
	defer r.close()
	err = run(ctx, r, pos)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errTimedOut) && !errors.Is(err, errTimedOut) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	if err != nil && migrations.IsUndefinedTable(err) {
		err = fmt.Errorf("%w (is schema %q migrated? see 'fencekit migrate status --schema %s')", err, r.g.schemaName(), r.g.schemaName())
	}
	if err != nil {
		return fail(prefix, err)
	}
	return ExitOK
}

var errTimedOut = errors.New("timed out")

var (
	undefinedFlagRE = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	badValueRE      = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]*): (.*)$`)
)

// flagError rewords the flag package's parse errors: "unknown flag --x",
// "--name "value": reason" (or the reason alone when it names the flag).
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := undefinedFlagRE.FindStringSubmatch(msg); m != nil {
		return "unknown flag --" + m[1]
	}
	if m := badValueRE.FindStringSubmatch(msg); m != nil {
		reason := m[3]
		switch {
		case strings.HasPrefix(reason, "--"+m[2]):
			return reason
		case reason == "parse error" || reason == "value out of range":
			reason = "not a whole number"
			if f := fs.Lookup(m[2]); f != nil {
				if g, ok := f.Value.(flag.Getter); ok {
					switch g.Get().(type) {
					case time.Duration:
						reason = "not a duration (write one like 90m, 24h or 1h30m)"
					case bool:
						reason = "not true or false"
					}
				}
			}
		}
		return fmt.Sprintf("--%s %q: %s", m[2], m[1], reason)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "--" + strings.TrimLeft(name, "-") + " needs a value"
	}
	return msg
}

// oneLine folds a multi-line error (pgx lists every address it tried) into
// one line.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, ":\n\t", ": ")
	s = strings.ReplaceAll(s, "\n\t", "; ")
	return strings.ReplaceAll(s, "\n", " ")
}

func commandHelp(w io.Writer, c command, fs *flag.FlagSet) {
	args := c.args
	if args != "" {
		args = " " + args
	}
	fmt.Fprintf(w, "Usage: fencekit %s [flags]%s\n\n%s\n\n", c.path(), args, strings.TrimSpace(c.long))
	var own []string
	fs.VisitAll(func(f *flag.Flag) {
		if !isGlobalFlag(f.Name) {
			own = append(own, f.Name)
		}
	})
	if len(own) > 0 {
		fmt.Fprint(w, "Flags:\n")
		sort.Strings(own)
		for _, name := range own {
			f := fs.Lookup(name)
			kind, text := flag.UnquoteUsage(f)
			if kind != "" {
				kind = " " + kind
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "  --%s%s\n        %s%s\n", name, kind, text, def)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, globalFlagsHelp+"\n"+exitCodesHelp)
}

// parseInterleaved parses flags anywhere among the positional arguments,
// which it returns in order; everything after a "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// splitCommand finds the command words ("migrate", "up") among args, which
// may be preceded by global flags, and returns them and everything else in
// order.
func splitCommand(args []string) (words, rest []string) {
	most := 2 // "<group> <command>"
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return words, append(rest, args[i:]...)
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			rest = append(rest, a)
			if name := strings.TrimLeft(a, "-"); !strings.Contains(name, "=") && globalTakesValue(name) && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
			continue
		}
		if len(words) == 1 {
			switch words[0] {
			case "version":
				most = 1
			case "help": // "help <group> <command>"
				most = 3
			}
		}
		if len(words) >= most {
			return words, append(rest, args[i:]...)
		}
		words = append(words, a)
	}
	return words, rest
}

func hasHelpFlag(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "--h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

func hasJSONFlag(args []string) bool {
	for _, a := range args {
		switch a {
		case "-json", "--json", "-json=true", "--json=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

// checkRootFlags parses flags given without a command, to name a bad one.
func checkRootFlags(args []string) error {
	var g globals
	fs := flag.NewFlagSet("fencekit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		return usagef("%v", err)
	}
	return usagef("missing command")
}

func printVersion(env Env, jsonOut bool) int {
	v := versionJSON{Version: "(unknown)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Version, v.Go = bi.Main.Version, bi.GoVersion
	}
	if jsonOut {
		writeJSON(env.Stdout, v)
	} else {
		fmt.Fprintf(env.Stdout, "fencekit %s (%s)\n", v.Version, v.Go)
	}
	return ExitOK
}

type versionJSON struct {
	Version string `json:"version"`
	Go      string `json:"go"`
}
