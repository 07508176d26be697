package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fencekit/fencekit/lease"
)

// printer writes results: JSON Lines with --json, text otherwise.
type printer struct {
	w    io.Writer
	json bool
}

// result is one printable result.
type result interface{ text(w io.Writer) }

func (p printer) print(v result) {
	if p.json {
		writeJSON(p.w, v)
		return
	}
	v.text(p.w)
}

func writeJSON(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorJSON{Error: "encoding output: " + err.Error(), ExitCode: ExitFailed})
	}
	_, _ = w.Write(append(b, '\n'))
}

type errorJSON struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// ownershipJSON is a key's state as every leases command prints it.
type ownershipJSON struct {
	Account     string     `json:"account"`
	Session     string     `json:"session"`
	State       string     `json:"state"`
	RunID       string     `json:"run_id,omitempty"`
	Token       int64      `json:"token,omitempty"`
	Holder      string     `json:"holder,omitempty"`
	AcquiredAt  *time.Time `json:"acquired_at,omitempty"`
	RenewedAt   *time.Time `json:"renewed_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	ReleasedAt  *time.Time `json:"released_at,omitempty"`
	RemainingMS int64      `json:"remaining_ms"`
	DBNow       time.Time  `json:"db_now"`
}

func ownership(o lease.Ownership) ownershipJSON {
	t := func(v time.Time) *time.Time {
		if v.IsZero() {
			return nil
		}
		u := v.UTC()
		return &u
	}
	j := ownershipJSON{
		Account: o.Key.AccountID, Session: o.Key.SessionID, State: o.State.String(),
		Token: int64(o.Token), Holder: o.Holder,
		AcquiredAt: t(o.AcquiredAt), RenewedAt: t(o.RenewedAt), ExpiresAt: t(o.ExpiresAt), ReleasedAt: t(o.ReleasedAt),
		RemainingMS: o.Remaining.Milliseconds(), DBNow: o.DBNow.UTC(),
	}
	if o.State != lease.StateNotFound {
		j.RunID = o.RunID.String()
	}
	return j
}

// describe is one line about a key's state, for people.
func (o ownershipJSON) describe() string {
	k := lease.Key{AccountID: o.Account, SessionID: o.Session}.String()
	switch o.State {
	case lease.StateNotFound.String():
		return k + " was never acquired (or its row was deleted)"
	case lease.StateHeld.String():
		h := ""
		if o.Holder != "" {
			h = fmt.Sprintf(" by %q", o.Holder)
		}
		return fmt.Sprintf("%s is held%s: run %s, token %d, expires in %s", k, h, o.RunID, o.Token,
			(time.Duration(o.RemainingMS) * time.Millisecond).String())
	}
	return fmt.Sprintf("%s is %s: last run %s, token %d", k, o.State, o.RunID, o.Token)
}
