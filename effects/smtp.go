package effects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"
)

// Mail is the frozen form of an e-mail, for SMTP targets.
type Mail struct {
	From string   `json:"from"`
	To   []string `json:"to"`
	Data []byte   `json:"data"` // the message: header lines, a blank line, the body (CRLF or LF)
}

// Freeze checks m (a sender, at least one recipient, no CR or LF in
// addresses, a non-empty message) and encodes it. The error is a
// *InputError.
func (m Mail) Freeze() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

func (m Mail) validate() error {
	bad := func(reason string) error { return &InputError{Field: "Request", Reason: reason} }
	if m.From == "" || strings.ContainsAny(m.From, "\r\n") {
		return bad("mail sender empty or with a line break")
	}
	if len(m.To) == 0 {
		return bad("mail without recipients")
	}
	for _, to := range m.To {
		if to == "" || strings.ContainsAny(to, "\r\n") {
			return bad("mail recipient empty or with a line break")
		}
	}
	if len(m.Data) == 0 {
		return bad("mail message empty")
	}
	return nil
}

// KeyHeaderSMTP is the header the SMTP deliverer adds to each message,
// carrying the effect's idempotency key.
const KeyHeaderSMTP = "Fencekit-Effect-Key"

// SMTP delivers frozen Mails to one SMTP server with net/smtp. SMTP has no
// idempotency key: configure its Target with AtMostOnce. The message gets a
// Fencekit-Effect-Key header. A refused connection, and a 4xx reply before
// the message was sent, are NotSent (retried); a 5xx reply before the
// message was sent is a rejection; any failure from DATA on leaves the
// outcome unknown.
type SMTP struct {
	// Addr is the server's host:port.
	Addr string
	// Auth, if set, authenticates (net/smtp refuses PLAIN auth without TLS
	// except to localhost).
	Auth smtp.Auth
	// HelloName is the EHLO name. Default "localhost".
	HelloName string
}

// Validate implements Validator.
func (s *SMTP) Validate(request []byte) error {
	_, err := decodeMail(request)
	return err
}

func decodeMail(request []byte) (Mail, error) {
	var m Mail
	if err := json.Unmarshal(request, &m); err != nil {
		return m, &InputError{Field: "Request", Reason: "not a frozen Mail: " + shorten(err.Error())}
	}
	return m, m.validate()
}

// Deliver implements Deliverer.
func (s *SMTP) Deliver(ctx context.Context, d Delivery) (Result, error) {
	m, err := decodeMail(d.Request)
	if err != nil {
		return Result{}, Reject(0, err.Error())
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return Result{}, NotSent(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	host, _, _ := net.SplitHostPort(s.Addr)
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		_ = conn.Close()
		return Result{}, beforeData(err)
	}
	defer c.Close()
	hello := s.HelloName
	if hello == "" {
		hello = "localhost"
	}
	if err := c.Hello(hello); err != nil {
		return Result{}, beforeData(err)
	}
	if s.Auth != nil {
		if err := c.Auth(s.Auth); err != nil {
			return Result{}, beforeData(err)
		}
	}
	if err := c.Mail(m.From); err != nil {
		return Result{}, beforeData(err)
	}
	for _, to := range m.To {
		if err := c.Rcpt(to); err != nil {
			return Result{}, beforeData(err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return Result{}, beforeData(err) // DATA refused: the message was not sent
	}
	// From here the server may accept the message whatever we see.
	if _, err := fmt.Fprintf(w, "%s: %s\r\n", KeyHeaderSMTP, d.Key); err != nil {
		return Result{}, err
	}
	if _, err := w.Write(m.Data); err != nil {
		return Result{}, err
	}
	if err := w.Close(); err != nil {
		var te *textproto.Error
		if errors.As(err, &te) && te.Code >= 500 {
			return Result{}, Reject(te.Code, te.Msg) // the server answered: not accepted
		}
		if te != nil && te.Code >= 400 {
			return Result{}, NotSent(err) // the server answered: not accepted this time
		}
		return Result{}, err
	}
	_ = c.Quit()
	return Result{Code: 250, Detail: "accepted by " + s.Addr}, nil
}

// beforeData classifies an error before the message was sent: a 5xx
// reply rejects, anything else did not send.
func beforeData(err error) error {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 {
		return Reject(te.Code, te.Msg)
	}
	return NotSent(err)
}
