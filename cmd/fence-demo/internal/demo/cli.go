package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Env is what Main needs from its process: arguments go separately.
type Env struct {
	Stdout, Stderr io.Writer
	// Getenv reads environment variables (os.Getenv in main).
	Getenv func(string) string
}

type command struct {
	name, args, summary string
	run                 func(ctx context.Context, env Env, args []string) error
}

func commands() []command {
	return []command{
		{"run", "[flags]", "run the two-devices scenario and check its end state (the default)", runScenarioCmd},
		{"acquire", "--session S [flags]", "acquire a session lease; prints run_id and token", acquireCmd},
		{"renew", "--session S --run-id ID [flags]", "renew a lease by run_id", renewCmd},
		{"release", "--session S --run-id ID [flags]", "release a lease by run_id", releaseCmd},
		{"inspect", "--session S [flags]", "ask the server who owns a session", inspectCmd},
		{"put", "--session S --token N [flags]", "a guarded write of the session's report (S3 and/or PostgreSQL)", putCmd},
		{"serve", "[--addr HOST:PORT] [flags]", "serve the story as a web page: the conversation in two browser tabs", serveCmd},
	}
}

const exitCodesHelp = `Exit codes:
  0  ok (the scenario: every end-state check held)
  1  a scenario check failed, or an operation failed (service unreachable, database error)
  2  usage: unknown command or flag, missing or malformed value (token, run id, key)
  3  refused by fencekit: lease held by another run, lost or not this run's, stale token, unauthorised
`

func usage(w io.Writer) {
	fmt.Fprint(w, `fence-demo shows fencekit against real PostgreSQL and MinIO: a desktop run
stalls past its lease, a browser run takes over, and every guard refuses the
stale run's late writes.

Usage:
  fence-demo [run flags]            run the scenario (same as "fence-demo run")
  fence-demo <command> [flags]
  fence-demo <command> --help

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\n"+exitCodesHelp)
}

// Main runs fence-demo with args (without the program name) and returns the
// process exit code (ExitOK, ExitFailed, ExitUsage or ExitRefused). Errors
// are printed to env.Stderr as one "fence-demo: …" line.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	name := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		usage(env.Stdout)
		return ExitOK
	}
	if name == "help" {
		usage(env.Stdout)
		return ExitOK
	}
	for _, c := range commands() {
		if c.name == name {
			err := c.run(ctx, env, args)
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK
			}
			if err != nil {
				fmt.Fprintf(env.Stderr, "fence-demo %s: %v\n", name, err)
				if errors.Is(err, ErrUsage) {
					fmt.Fprintf(env.Stderr, "run 'fence-demo %s --help' for usage\n", name)
				}
			}
			return ExitCode(err)
		}
	}
	fmt.Fprintf(env.Stderr, "fence-demo: unknown command %q\n", name)
	usage(env.Stderr)
	return ExitUsage
}

// flagSet is a subcommand's flags and its --help text.
type flagSet struct {
	*flag.FlagSet
	help func()
}

// newFlags returns a FlagSet whose --help prints to stdout and whose errors
// come back as *UsageError (printed once, by Main).
func newFlags(env Env, c command, long string) *flagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // parse errors are reported by Main, help by help
	help := func() {
		w := env.Stdout
		fmt.Fprintf(w, "Usage: fence-demo %s %s\n\n%s\n\nFlags:\n", c.name, c.args, strings.TrimSpace(long))
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		fmt.Fprint(w, "\n"+exitCodesHelp)
	}
	return &flagSet{FlagSet: fs, help: help}
}

// parse parses args; --help prints usage and returns flag.ErrHelp; other
// errors become *UsageError. Positional arguments are refused.
func parse(fs *flagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.help()
			return flag.ErrHelp
		}
		return &UsageError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func lookup(name string) command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	panic("demo: no command " + name)
}

func runScenarioCmd(ctx context.Context, env Env, args []string) error {
	fs := newFlags(env, lookup("run"), `
Runs the scenario: desktop run A acquires the session lease and sends its
writes; the network to A stalls longer than the TTL, A's lease context ends;
browser run B takes over and writes; A's late writes, renewal and release are
refused; both clients reconcile with the server; the end state is checked.
Prints one line per event (or JSON Lines with --json).
"fence-demo help" lists the subcommands for exploring by hand.`)
	var conn Conn
	conn.register(fs.FlagSet, env.Getenv)
	jsonOut := fs.Bool("json", false, "print one JSON object per event and line instead of the timeline")
	color := fs.String("color", string(ColorAuto), "colour the timeline: auto (terminal and NO_COLOR unset), always, never")
	timeline := fs.String("timeline", "", "also write the timeline picture to this .svg file")
	ttl := fs.Duration("ttl", DefaultTTL, "lease TTL of the scenario (A stalls for 1.25×TTL)")
	session := fs.String("session", "", "session id (default: a fresh conv-<random> per run)")
	if err := parse(fs, args); err != nil {
		return err
	}
	mode, err := ParseColorMode(*color)
	if err != nil {
		return err
	}
	if *timeline != "" && !strings.HasSuffix(strings.ToLower(*timeline), ".svg") {
		return usagef("--timeline %q: the file name must end in .svg", *timeline)
	}
	var sink func(Event)
	if *jsonOut {
		sink = JSONPrinter{W: env.Stdout}.Print
	} else {
		sink = TextPrinter{W: env.Stdout, Color: UseColor(mode, env.Stdout, env.Getenv)}.Print
	}
	start := time.Now()
	res, err := RunScenario(ctx, ScenarioConfig{Conn: conn, TTL: *ttl, Session: *session, Sink: sink})
	if res != nil && *timeline != "" {
		if werr := WriteSVGFile(*timeline, res); werr != nil {
			return errors.Join(err, werr)
		}
	}
	if res != nil && !*jsonOut {
		summarize(env.Stdout, res, err, time.Since(start), *timeline)
	}
	return err
}

func summarize(w io.Writer, res *Result, err error, took time.Duration, timeline string) {
	ok := 0
	for _, c := range res.Checks {
		if c.OK {
			ok++
		}
	}
	fmt.Fprintf(w, "\n%d/%d checks held in %v", ok, len(res.Checks), took.Round(time.Millisecond))
	if res.TokenA != 0 {
		fmt.Fprintf(w, ": in %s run A (token %d) was fenced off by run B (token %d)", res.Key, res.TokenA, res.TokenB)
	}
	if res.TokenD != 0 {
		fmt.Fprintf(w, "; run C (token %d) was taken over while alive by run D (token %d), its context ended %v after Takeover returned",
			res.TokenC, res.TokenD, res.TakeoverNotice.Round(10*time.Microsecond))
	}
	fmt.Fprintln(w)
	if timeline != "" {
		fmt.Fprintf(w, "timeline picture: %s\n", timeline)
	}
	if err != nil {
		fmt.Fprintln(w, "FAILED")
	}
}
