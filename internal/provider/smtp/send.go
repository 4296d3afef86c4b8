package smtp

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"strings"

	"github.com/emersion/go-msgauth/dkim"
	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/mailroom/mailroom/internal/provider"
)

// SignedHeaders are the header fields every DKIM signature covers. Each is
// signed once more than the message has it ("oversigned"): a field present
// once, or absent, cannot be added later, above or below, without breaking
// the signature, so nobody can put a second From or Subject over the one
// the sender wrote. The MIME fields are signed too: a body is read through
// its Content-Type and Content-Transfer-Encoding, so a changed encoding
// would turn a signed body into other text.
var SignedHeaders = []string{
	"From", "To", "Cc", "Subject", "Date", "Message-ID", "Reply-To",
	"MIME-Version", "Content-Type", "Content-Transfer-Encoding",
}

// signedKeys lists each of SignedHeaders twice: once for the field the
// message has (messages built here have at most one of each), once for
// the one nobody may add.
var signedKeys = append(append([]string(nil), SignedHeaders...), SignedHeaders...)

// Sign returns raw with a DKIM-Signature header field prepended: rsa-sha256,
// relaxed/relaxed, d=key.Domain, s=key.Selector, h=SignedHeaders, twice.
func Sign(raw []byte, key provider.DKIMKey) ([]byte, error) {
	if key.PrivateKey == nil {
		return nil, fmt.Errorf("smtp: DKIM key %s._domainkey.%s has no private key", key.Selector, key.Domain)
	}
	var b bytes.Buffer
	b.Grow(len(raw) + 1024)
	err := dkim.Sign(&b, bytes.NewReader(raw), &dkim.SignOptions{
		Domain:                 key.Domain,
		Selector:               key.Selector,
		Signer:                 key.PrivateKey,
		Hash:                   crypto.SHA256,
		HeaderCanonicalization: dkim.CanonicalizationRelaxed,
		BodyCanonicalization:   dkim.CanonicalizationRelaxed,
		HeaderKeys:             signedKeys,
	})
	if err != nil {
		return nil, fmt.Errorf("smtp: DKIM signing for %s: %w", key.Domain, err)
	}
	return b.Bytes(), nil
}

// Send DKIM-signs m (when m.DKIM is set) and relays it: MAIL FROM m.From,
// RCPT TO every recipient (Bcc included; they are not in the headers),
// DATA. On acceptance it returns the message's Message-ID without angle
// brackets (m.EmailID if the message has none). See the package comment
// for how failures are classified.
func (r *Relay) Send(ctx context.Context, m provider.Outbound) (string, error) {
	if err := checkEnvelope(m); err != nil {
		return "", err
	}
	raw := m.Raw
	if m.DKIM != nil {
		signed, err := Sign(m.Raw, *m.DKIM)
		if err != nil {
			return "", err
		}
		raw = signed
	}
	id := messageID(m.Raw)
	if id == "" {
		id = m.EmailID
	}
	if err := r.relay(ctx, m.From, m.Recipients, raw); err != nil {
		return "", err
	}
	return id, nil
}

// checkEnvelope refuses, for good, envelopes no relay could take.
func checkEnvelope(m provider.Outbound) error {
	if len(m.Recipients) == 0 {
		return &provider.RejectedError{Reason: "no recipients"}
	}
	for _, a := range append([]string{m.From}, m.Recipients...) {
		if a == "" || strings.ContainsAny(a, "\r\n<> ") || !strings.Contains(a, "@") {
			return &provider.RejectedError{Reason: fmt.Sprintf("invalid envelope address %q", a)}
		}
	}
	if len(m.Raw) == 0 {
		return &provider.RejectedError{Reason: "empty message"}
	}
	return nil
}

// messageID is the Message-ID of raw without angle brackets, or "".
func messageID(raw []byte) string {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(msg.Header.Get("Message-ID"))
	return strings.TrimSuffix(strings.TrimPrefix(id, "<"), ">")
}

// relay runs one SMTP transaction on a new connection.
func (r *Relay) relay(ctx context.Context, from string, to []string, raw []byte) error {
	c, isTLS, done, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer done()

	if r.hasAuth {
		if err := r.auth(c, isTLS); err != nil {
			return r.fail(ctx, "AUTH", err)
		}
	}
	opts := &gosmtp.MailOptions{Size: int64(len(raw))}
	if !isASCII(from) || !isASCII(strings.Join(to, "")) {
		if ok, _ := c.Extension("SMTPUTF8"); !ok {
			return &provider.RejectedError{Reason: "non-ASCII envelope address, and the relay does not support SMTPUTF8"}
		}
		opts.UTF8 = true
	}
	if err := c.Mail(from, opts); err != nil {
		return r.fail(ctx, "MAIL FROM:<"+from+">", err)
	}
	for _, rcpt := range to {
		if err := c.Rcpt(rcpt, nil); err != nil {
			return r.fail(ctx, "RCPT TO:<"+rcpt+">", err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return r.fail(ctx, "DATA", err)
	}
	if _, err := w.Write(raw); err != nil {
		return r.fail(ctx, "DATA", err)
	}
	if err := w.Close(); err != nil {
		return r.fail(ctx, "DATA", err)
	}
	// Accepted: the message is the relay's now. QUIT is a courtesy.
	_ = c.Quit()
	return nil
}

// connect dials the relay, greets it and sets up TLS. done closes the
// connection and stops watching ctx; until then a cancelled ctx closes the
// connection, which aborts whatever the client is waiting for.
func (r *Relay) connect(ctx context.Context) (c *gosmtp.Client, isTLS bool, done func(), err error) {
	useSTARTTLS := !r.implicitTLS && (r.requireTLS || r.sawSTARTTLS.Load())
	for {
		c, isTLS, done, err = r.dial(ctx, useSTARTTLS)
		if err != nil || isTLS || r.implicitTLS || useSTARTTLS {
			return c, isTLS, done, err
		}
		// Plaintext so far: take STARTTLS if the relay offers it, on a
		// fresh connection (go-smtp only upgrades right after the greeting).
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return c, false, done, nil
		}
		r.sawSTARTTLS.Store(true)
		_ = c.Quit()
		done()
		useSTARTTLS = true
	}
}

// dial opens one connection: implicit TLS, STARTTLS or plaintext, and says
// EHLO.
func (r *Relay) dial(ctx context.Context, startTLS bool) (*gosmtp.Client, bool, func(), error) {
	d := net.Dialer{Timeout: r.dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return nil, false, nil, r.fail(ctx, "connect", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	closeAll := func() {
		stop()
		conn.Close()
	}

	var c *gosmtp.Client
	switch {
	case r.implicitTLS:
		tc := tls.Client(conn, r.clientTLSConfig())
		hctx, cancel := context.WithTimeout(ctx, r.dialTimeout)
		err = tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			closeAll()
			return nil, false, nil, r.fail(ctx, "TLS handshake", err)
		}
		c = gosmtp.NewClient(tc)
	case startTLS:
		// go-smtp reads the greeting and says EHLO and STARTTLS inside, on
		// its own minutes-long timeouts: bound them by the command timeout.
		// (The handshake comes with the next command, under the client's.)
		gctx, cancel := ctx, context.CancelFunc(func() {})
		if r.commandTimeout > 0 {
			gctx, cancel = context.WithTimeoutCause(ctx, r.commandTimeout, errSilent)
		}
		guard := context.AfterFunc(gctx, func() { conn.Close() })
		c, err = gosmtp.NewClientStartTLS(conn, r.clientTLSConfig())
		guard()
		cancel()
		if err != nil {
			closeAll()
			if errors.Is(context.Cause(gctx), errSilent) {
				err = fmt.Errorf("%w within %s (%v)", errSilent, r.commandTimeout, err)
			}
			return nil, false, nil, r.fail(ctx, "STARTTLS", err)
		}
	default:
		c = gosmtp.NewClient(conn)
	}
	if r.commandTimeout > 0 {
		c.CommandTimeout = r.commandTimeout
	}
	if r.submissionTimeout > 0 {
		c.SubmissionTimeout = r.submissionTimeout
	}
	// After STARTTLS this is the second EHLO (the first, inside go-smtp,
	// says "localhost"); the TLS handshake happens on its way.
	if err := c.Hello(helloName(r.localName, conn.LocalAddr())); err != nil {
		closeAll()
		stage := "EHLO"
		if startTLS {
			stage = "STARTTLS"
		}
		return nil, false, nil, r.fail(ctx, stage, err)
	}
	_, isTLS := c.TLSConnectionState()
	return c, isTLS, closeAll, nil
}

// errSilent is a relay that did not answer in time.
var errSilent = errors.New("no reply from the relay")

// auth logs in with PLAIN, or LOGIN when that is all the relay offers.
func (r *Relay) auth(c *gosmtp.Client, isTLS bool) error {
	if !isTLS && !r.insecureAuth {
		return errors.New("refusing to send credentials without TLS: the relay did not offer STARTTLS (give a relay that does, smtps://, or a URL without credentials for a relay that takes this host's mail without them)")
	}
	ok, mechs := c.Extension("AUTH")
	if !ok {
		return errors.New("the relay does not offer AUTH, but the URL has credentials")
	}
	has := func(m string) bool {
		for _, x := range strings.Fields(mechs) {
			if strings.EqualFold(x, m) {
				return true
			}
		}
		return false
	}
	switch {
	case has(sasl.Plain):
		return c.Auth(sasl.NewPlainClient("", r.user, r.pass))
	case has(sasl.Login):
		return c.Auth(sasl.NewLoginClient(r.user, r.pass))
	default:
		return fmt.Errorf("the relay offers AUTH %s; only PLAIN and LOGIN are supported", mechs)
	}
}

// permanentStages are the commands whose 5xx replies refuse the message.
func permanentStage(stage string) bool {
	return stage == "DATA" || strings.HasPrefix(stage, "MAIL FROM:") || strings.HasPrefix(stage, "RCPT TO:")
}

// fail classifies err from stage (see the package comment).
func (r *Relay) fail(ctx context.Context, stage string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("smtp %s via %s: %w (%v)", stage, r.addr, ctxErr, err)
	}
	var se *gosmtp.SMTPError
	if errors.As(err, &se) {
		reply := formatReply(se)
		if stage == "AUTH" {
			// A relay's answer to a login may repeat the credentials
			// it was given; its codes say what went wrong.
			reply = replyCode(se) + " (the relay's text is not shown: it may repeat the credentials)"
		}
		re := &ReplyError{Stage: stage, Reply: reply, Code: se.Code, err: se}
		if throttleCodes[se.Code] {
			return &provider.ThrottledError{Reason: stage + ": " + reply, Err: re}
		}
		// 530 is "authenticate first" / "STARTTLS first": the relay's
		// configuration, not the message, is at fault.
		if se.Code/100 == 5 && se.Code != 530 && permanentStage(stage) {
			return &provider.RejectedError{Reason: stage + ": " + reply, Code: replyCode(se)}
		}
		return re
	}
	return fmt.Errorf("smtp %s via %s: %w", stage, r.addr, err)
}

// throttleCodes are the replies with which relays ask senders to slow down
// (421 closing, 451 try later, 452 too many messages or recipients for now).
var throttleCodes = map[int]bool{421: true, 451: true, 452: true}

// ReplyError is a transient (or configuration) refusal by the relay: a 4xx
// reply, or a 5xx reply outside MAIL, RCPT and DATA (e.g. 535 to AUTH).
type ReplyError struct {
	Stage string // "AUTH", "RCPT TO:<a@b>", ...
	Reply string // "451 4.3.0 try later"
	Code  int
	err   error
}

func (e *ReplyError) Error() string { return "smtp " + e.Stage + ": relay replied " + e.Reply }

func (e *ReplyError) Unwrap() error { return e.err }

// replyCode is the reply's codes alone: "550 5.1.1".
func replyCode(se *gosmtp.SMTPError) string {
	s := fmt.Sprint(se.Code)
	if ec := se.EnhancedCode; ec != gosmtp.EnhancedCodeNotSet && ec != gosmtp.NoEnhancedCode {
		s += fmt.Sprintf(" %d.%d.%d", ec[0], ec[1], ec[2])
	}
	return s
}

// formatReply renders the reply as the relay sent it: "550 5.1.1 text".
func formatReply(se *gosmtp.SMTPError) string {
	s := replyCode(se)
	if msg := strings.Join(strings.Fields(se.Message), " "); msg != "" {
		s += " " + msg
	}
	return s
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
