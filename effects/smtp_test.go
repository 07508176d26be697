package effects_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fencetest"
)

// mailpit returns the SMTP address and API base of the test Mailpit.
func mailpit(t *testing.T) (string, string) {
	t.Helper()
	fencetest.SkipShort(t)
	addr, api := os.Getenv("TEST_SMTP_ADDR"), os.Getenv("TEST_MAILPIT_API")
	if addr == "" || api == "" {
		fencetest.Missing(t, "TEST_SMTP_ADDR / TEST_MAILPIT_API not set (scripts/services.sh starts Mailpit)")
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections) // the API reads' keep-alive connections
	return addr, api
}

// mailpitMessages returns the ids of the messages whose subject is subject.
func mailpitMessages(t *testing.T, api, subject string) []string {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/search?query=" + url.QueryEscape(`subject:"`+subject+`"`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Messages []struct{ ID string } `json:"messages"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	ids := make([]string, 0, len(out.Messages))
	for _, m := range out.Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

// An e-mail recorded under a lease reaches a real SMTP server (Mailpit)
// once, with the effect's key in a header; an at-most-once relay that died
// after the send leaves it ambiguous and sends no second copy.
func TestSMTPDeliversOnceToMailpit(t *testing.T) {
	addr, api := mailpit(t)
	e := newEnv(t)
	mail := effects.Target{Name: "mail", AtMostOnce: true, Deliverer: &effects.SMTP{Addr: addr}}
	o := e.outbox(mail)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)

	subject := "receipt " + fencetest.RandomName("")
	b, err := effects.Mail{From: "shop@example.test", To: []string{"ann@example.test"},
		Data: []byte("Subject: " + subject + "\r\n\r\nThank you.\r\n")}.Freeze()
	require.NoError(t, err)
	id, err := o.Record(l.Context(), effects.Effect{Target: "mail", RequestKey: "receipt-1", Request: b})
	require.NoError(t, err)

	crashSubject := "crash " + fencetest.RandomName("")
	cb, err := effects.Mail{From: "shop@example.test", To: []string{"bob@example.test"},
		Data: []byte("Subject: " + crashSubject + "\r\n\r\nOnce.\r\n")}.Freeze()
	require.NoError(t, err)
	crashID, err := o.Record(l.Context(), effects.Effect{Target: "mail", RequestKey: "receipt-2", Request: cb})
	require.NoError(t, err)

	e.relay([]effects.Target{mail}, effects.RelayConfig{ClaimFor: 300 * time.Millisecond}, func(r *effects.Relay) {
		effects.SetHooks(r, nil, func(got uuid.UUID, _ int64) bool { return got == crashID })
	})
	in, err := o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	ids := mailpitMessages(t, api, subject)
	require.Len(t, ids, 1)
	resp, err := http.Get(fmt.Sprintf("%s/api/v1/message/%s/headers", api, ids[0]))
	require.NoError(t, err)
	defer resp.Body.Close()
	var headers map[string][]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&headers))
	require.Equal(t, []string{effects.IdempotencyKey(id)}, headers[effects.KeyHeaderSMTP])

	in, err = o.Await(bg(), crashID)
	require.NoError(t, err)
	require.Equal(t, effects.StateAmbiguous, in.State)
	require.Len(t, mailpitMessages(t, api, crashSubject), 1, "the interrupted mail was sent once, never again")
}
