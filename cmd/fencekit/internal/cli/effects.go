package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/lease"
)

func effectsCommands() []command {
	return []command{
		{group: "effects", name: "list", summary: "list recorded effects, newest first", timeout: DefaultTimeout,
			long: `Lists the effects of the schema's outbox (package effects), newest first,
filtered by --state (pending, sending, delivered, rejected, ambiguous, canceled),
--target and --account.`,
			setup: setupEffectsList},
		{group: "effects", name: "retry", args: "ID", minPos: 1, maxPos: 1, summary: "send an ambiguous or rejected effect again", timeout: DefaultTimeout,
			long: `Makes an ambiguous or rejected effect pending again, due now, with a new dedup
window (effects.Outbox.Retry). It is sent with the same idempotency key; if the
first send did act and the target no longer keeps that key, it acts twice.`,
			setup: setupEffectsRetry},
		{group: "effects", name: "cancel", args: "ID", minPos: 1, maxPos: 1, summary: "cancel a pending effect no relay holds", timeout: DefaultTimeout,
			long: `Cancels a pending effect that no relay holds a live claim on
(effects.Outbox.Cancel). An effect a relay claimed before may already have been
sent by it: cancel then only stops further deliveries.`,
			setup: setupEffectsCancel},
	}
}

func (r *runner) outbox(ctx context.Context) (*effects.Outbox, error) {
	pool, err := r.database(ctx)
	if err != nil {
		return nil, err
	}
	o, err := effects.New(effects.Config{Pool: pool, Schema: r.g.schemaName()})
	if err != nil {
		return nil, usagef("%v", err)
	}
	return o, nil
}

type effectJSON struct {
	ID         string `json:"id"`
	Target     string `json:"target"`
	Account    string `json:"account"`
	Session    string `json:"session"`
	RequestKey string `json:"request_key"`
	Token      int64  `json:"token"`
	State      string `json:"state"`
	Attempts   int    `json:"attempts"`
	Epoch      int64  `json:"epoch"`
	CreatedAt  string `json:"created_at"`
	Code       int    `json:"code,omitempty"`
	Detail     string `json:"detail,omitempty"`
	LastError  string `json:"last_error,omitempty"`
}

func effectOut(in effects.Info) effectJSON {
	return effectJSON{ID: in.ID.String(), Target: in.Target, Account: in.Key.AccountID, Session: in.Key.SessionID,
		RequestKey: in.RequestKey, Token: int64(in.Token), State: string(in.State), Attempts: in.Attempts, Epoch: in.Epoch,
		CreatedAt: in.CreatedAt.UTC().Format(time.RFC3339Nano), Code: in.Code, Detail: in.Detail, LastError: in.LastError}
}

func (e effectJSON) text(w io.Writer) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.Target, e.State, e.RequestKey, e.Attempts, e.Detail)
}

type effectTable struct{ rows []effectJSON }

func (t effectTable) text(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTARGET\tSTATE\tREQUEST KEY\tATTEMPTS\tDETAIL")
	for _, e := range t.rows {
		e.text(tw)
	}
	_ = tw.Flush()
}

func setupEffectsList(fs *flag.FlagSet, _ *runner) runFunc {
	state := fs.String("state", "", "only effects in this `STATE`")
	target := fs.String("target", "", "only effects to this `TARGET`")
	account := fs.String("account", "", "only effects of this `ACCOUNT`")
	limit := fs.Int("limit", 100, "most effects to print, 1..10000")
	return func(ctx context.Context, r *runner, _ []string) error {
		switch st := effects.State(*state); {
		case st == "", st == effects.StatePending, st == effects.StateSending, st.Final():
		default:
			return usagef("--state %q: want pending, sending, delivered, rejected, ambiguous or canceled", *state)
		}
		if *limit < 1 || *limit > 10000 {
			return usagef("--limit %d: want 1..10000", *limit)
		}
		o, err := r.outbox(ctx)
		if err != nil {
			return err
		}
		list, err := o.List(ctx, effects.ListOptions{State: effects.State(*state), Target: *target,
			Key: lease.Key{AccountID: *account}, Limit: *limit})
		if err != nil {
			return err
		}
		out := make([]effectJSON, 0, len(list))
		for _, in := range list {
			out = append(out, effectOut(in))
		}
		if r.printer.json {
			for _, e := range out {
				r.printer.print(e)
			}
			return nil
		}
		r.printer.print(effectTable{rows: out})
		return nil
	}
}

func effectID(pos []string) (uuid.UUID, error) {
	id, err := uuid.Parse(pos[0])
	if err != nil {
		return uuid.Nil, usagef("effect id %q: %v", pos[0], err)
	}
	return id, nil
}

func setupEffectsRetry(*flag.FlagSet, *runner) runFunc {
	return func(ctx context.Context, r *runner, pos []string) error {
		return effectUpdate(ctx, r, pos, func(o *effects.Outbox, id uuid.UUID) error { return o.Retry(ctx, id) })
	}
}

func setupEffectsCancel(fs *flag.FlagSet, _ *runner) runFunc {
	reason := fs.String("reason", "by an operator", "why, stored with the effect")
	return func(ctx context.Context, r *runner, pos []string) error {
		return effectUpdate(ctx, r, pos, func(o *effects.Outbox, id uuid.UUID) error { return o.Cancel(ctx, id, *reason) })
	}
}

func effectUpdate(ctx context.Context, r *runner, pos []string, do func(*effects.Outbox, uuid.UUID) error) error {
	id, err := effectID(pos)
	if err != nil {
		return err
	}
	o, err := r.outbox(ctx)
	if err != nil {
		return err
	}
	if err := do(o, id); err != nil {
		return err
	}
	in, err := o.Get(ctx, id)
	if err != nil {
		return err
	}
	r.printer.print(effectOut(in))
	return nil
}
