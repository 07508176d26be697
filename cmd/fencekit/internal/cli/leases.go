package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/lease"
)

// MaxListLimit is the most keys "leases list" prints.
const MaxListLimit = 10_000

func leasesCommands() []command {
	return []command{
		{group: "leases", name: "list", summary: "keys with their state, owner and token", timeout: DefaultTimeout,
			long: `Lists the schema's lease keys in (account, session) order with their state
(held, expired, released), run, token, holder label and expiry, as the database
sees them now (lease.Manager.List). Released and expired rows stay listed until
"fencekit janitor sweep" deletes them. It only reads.`,
			setup: setupList},
		{group: "leases", name: "inspect", args: "ACCOUNT SESSION", minPos: 2, maxPos: 2,
			summary: "who owns one key now", timeout: DefaultTimeout,
			long: `Shows one key's state as the database sees it now (lease.Manager.Inspect):
held (by which run, token, holder label, time left), expired, released or never
acquired. It only reads.`,
			setup: setupInspect},
		{group: "leases", name: "revoke", args: "ACCOUNT SESSION", minPos: 2, maxPos: 2,
			summary: "end a stuck conversation's grant now", timeout: DefaultTimeout,
			long: `Ends the key's live grant now, in one statement (lease.Manager.RevokeCurrent; with --run,
lease.Manager.Revoke): the
grant expires on the database clock. From then on its holder's renewals are
refused (its process learns at its next renewal and cancels its work's
context), its release changes nothing, and the next grant takes a larger token,
so the guards refuse the old holder's writes once the new holder has written.
Waiters of the key are woken at once. Work the old holder has in flight is not
stopped by this: only its context and the guards stop it.

A key nobody holds is not an error: the command exits 0 and shows its state.
--run RUN revokes only that run's grant (a newer grant is left alone).`,
			setup: setupRevoke},
		{group: "leases", name: "watch", args: "ACCOUNT SESSION", minPos: 2, maxPos: 2,
			summary: "print one key's ownership events, one per line", timeout: 0,
			long: `Prints the key's current state, then one line per ownership change — granted,
taken-over, renewed, released, expired — as lease.Manager.Watch reports them
(notifications at once; grants of a free key and expiries within --poll). Runs
until interrupted, --count events or --timeout (ending either way is exit 0).`,
			setup: setupWatch},
	}
}

// key validates the positional ACCOUNT SESSION.
func key(pos []string) (lease.Key, error) {
	k := lease.Key{AccountID: pos[0], SessionID: pos[1]}
	if err := k.Validate(); err != nil {
		return lease.Key{}, usagef("ACCOUNT SESSION: %v", err)
	}
	return k, nil
}

// manager opens the lease database and a Manager on it; an unreachable
// database fails here with its cause.
func (r *runner) manager(ctx context.Context) (*lease.Manager, error) {
	cfg, err := r.dbConfig("", "")
	if err != nil {
		return nil, err
	}
	p, err := r.pool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m, err := lease.New(lease.Config{Pool: p, Schema: r.g.schemaName()})
	if err != nil {
		return nil, err
	}
	r.onClose(func() { _ = m.Close() }) //nolint:contextcheck // Close bounds its own statements by CallTimeout

	if err := ping(ctx, p, "lease database"); err != nil {
		return nil, err
	}
	return m, nil
}

func (o ownershipJSON) text(w io.Writer) { fmt.Fprintln(w, o.describe()) }

type leaseTable struct{ rows []ownershipJSON }

func (t leaseTable) text(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tSESSION\tSTATE\tTOKEN\tRUN\tHOLDER\tEXPIRES")
	for _, o := range t.rows {
		exp := "-"
		if o.ExpiresAt != nil {
			exp = o.ExpiresAt.Format(time.RFC3339)
			if o.State == lease.StateHeld.String() {
				exp = "in " + (time.Duration(o.RemainingMS) * time.Millisecond).String()
			}
		}
		h := o.Holder
		if h == "" {
			h = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", o.Account, o.Session, o.State, o.Token, o.RunID, h, exp)
	}
	_ = tw.Flush()
}

func setupList(fs *flag.FlagSet, _ *runner) runFunc {
	account := fs.String("account", "", "only this `ACCOUNT`")
	held := fs.Bool("held", false, "only keys held now")
	limit := fs.Int("limit", lease.DefaultListLimit, fmt.Sprintf("most keys to print, 1..%d", MaxListLimit))
	return func(ctx context.Context, r *runner, _ []string) error {
		if *limit < 1 || *limit > MaxListLimit {
			return usagef("--limit %d: want 1..%d", *limit, MaxListLimit)
		}
		if *account != "" {
			if err := (lease.Key{AccountID: *account, SessionID: "x"}).Validate(); err != nil {
				return usagef("--account: %v", err)
			}
		}
		m, err := r.manager(ctx)
		if err != nil {
			return err
		}
		var (
			out   []ownershipJSON
			after lease.Key
			more  bool
		)
		sel := []lease.Option{lease.WithAccount(*account)}
		if *held {
			sel = append(sel, lease.WithHeldOnly())
		}
		for len(out) < *limit {
			page, err := m.List(ctx, append(slices.Clip(sel), lease.WithAfter(after),
				lease.WithLimit(min(*limit-len(out), lease.MaxBatch)))...)
			if err != nil {
				return err
			}
			for _, o := range page {
				out = append(out, ownership(o))
			}
			if len(page) == 0 || len(out) >= *limit {
				break
			}
			after = page[len(page)-1].Key
		}
		if len(out) == *limit {
			last := out[len(out)-1]
			next, err := m.List(ctx, append(slices.Clip(sel), lease.WithLimit(1),
				lease.WithAfter(lease.Key{AccountID: last.Account, SessionID: last.Session}))...)
			if err != nil {
				return err
			}
			more = len(next) > 0
		}
		if r.printer.json {
			for _, o := range out {
				r.printer.print(o)
			}
		} else {
			r.printer.print(leaseTable{rows: out})
		}
		if more {
			r.warnf("more keys follow the first %d: narrow with --account or --held, or raise --limit (at most %d)", *limit, MaxListLimit)
		}
		return nil
	}
}

func setupInspect(*flag.FlagSet, *runner) runFunc {
	return func(ctx context.Context, r *runner, pos []string) error {
		k, err := key(pos)
		if err != nil {
			return err
		}
		m, err := r.manager(ctx)
		if err != nil {
			return err
		}
		o, err := m.Inspect(ctx, k)
		if err != nil {
			return err
		}
		r.printer.print(ownership(o))
		return nil
	}
}

type revokeJSON struct {
	Revoked      bool   `json:"revoked"`
	RevokedRunID string `json:"revoked_run_id,omitempty"`
	RevokedToken int64  `json:"revoked_token,omitempty"`
	ownershipJSON
}

func (j revokeJSON) text(w io.Writer) {
	if j.Revoked {
		fmt.Fprintf(w, "revoked run %s (token %d): its renewals are refused and the next grant takes a larger token; %s\n",
			j.RevokedRunID, j.RevokedToken, j.describe())
		return
	}
	fmt.Fprintf(w, "nothing to revoke: %s\n", j.describe())
}

func setupRevoke(fs *flag.FlagSet, _ *runner) runFunc {
	run := fs.String("run", "", "revoke only the grant of run `RUN` (a run id, as inspect shows it)")
	return func(ctx context.Context, r *runner, pos []string) error {
		k, err := key(pos)
		if err != nil {
			return err
		}
		var id uuid.UUID
		if *run != "" {
			if id, err = uuid.Parse(*run); err != nil || id == uuid.Nil {
				return usagef("--run %q: not a run id (a UUID other than the zero one)", *run)
			}
		}
		m, err := r.manager(ctx)
		if err != nil {
			return err
		}
		var rv lease.Revocation
		if id == uuid.Nil {
			rv, err = m.RevokeCurrent(ctx, k)
		} else {
			rv, err = m.Revoke(ctx, k, id)
		}
		if err != nil {
			return err
		}
		j := revokeJSON{Revoked: rv.Revoked, ownershipJSON: ownership(rv.Ownership)}
		if rv.Revoked {
			j.RevokedRunID, j.RevokedToken = rv.RunID.String(), int64(rv.Token)
		}
		r.printer.print(j)
		return nil
	}
}

type watchJSON struct {
	Event     string `json:"event"`
	Displaced string `json:"displaced_run_id,omitempty"`
	Dropped   bool   `json:"dropped,omitempty"`
	ownershipJSON
}

func (j watchJSON) text(w io.Writer) {
	extra := ""
	if j.Displaced != "" {
		extra = " (displaced run " + j.Displaced + ")"
	}
	if j.Dropped {
		extra += " (events were dropped: this is the latest state)"
	}
	fmt.Fprintf(w, "%s  %-10s %s%s\n", j.DBNow.Format("15:04:05.000"), j.Event, j.describe(), extra)
}

func setupWatch(fs *flag.FlagSet, _ *runner) runFunc {
	count := fs.Int("count", 0, "stop after this many events (0: no limit)")
	poll := fs.Duration("poll", lease.DefaultWatchPoll, "safety-net poll interval (grants of a free key and expiries are seen within it), at least 10ms")
	return func(ctx context.Context, r *runner, pos []string) error {
		k, err := key(pos)
		if err != nil {
			return err
		}
		if *count < 0 {
			return usagef("--count %d: negative", *count)
		}
		if *poll < 10*time.Millisecond {
			return usagef("--poll %s: below 10ms", *poll)
		}
		m, err := r.manager(ctx)
		if err != nil {
			return err
		}
		// One read first, so that an unreachable database or an unmigrated
		// schema fails now (the watch's reader would only retry quietly).
		if _, err := m.Inspect(ctx, k); err != nil {
			return err
		}
		w, err := m.Watch(ctx, k, lease.WithWatchPoll(*poll))
		if err != nil {
			return err
		}
		defer w.Close()
		for n := 0; *count == 0 || n < *count; n++ {
			ev, err := w.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted or --timeout: the watch is over
				}
				if errors.Is(err, lease.ErrWatcherClosed) {
					return nil
				}
				return err
			}
			j := watchJSON{Event: ev.Kind.String(), Dropped: ev.Dropped, ownershipJSON: ownership(ev.Ownership)}
			if ev.Displaced != uuid.Nil {
				j.Displaced = ev.Displaced.String()
			}
			r.printer.print(j)
		}
		return nil
	}
}
