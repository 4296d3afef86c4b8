// Package smtp is the provider that relays mail through an SMTP server
// (MAILROOM_SMTP_URL), DKIM-signing every message with the sending domain's
// active key before it leaves. Acceptance by the relay counts as delivered.
//
// Replies map onto the provider port like this:
//   - a 5xx reply to MAIL, RCPT or DATA is a permanent refusal of the message
//     (*provider.RejectedError carrying the reply, code included);
//   - 421, 451 and 452 ask to slow down (*provider.ThrottledError): the
//     send is retried later without counting as a failing provider;
//   - another 4xx reply, a network error, a TLS failure or a cancelled context is
//     transient (a plain error) and the send is retried;
//   - a failure to authenticate (535 and friends, or 530 "authentication
//     required" on MAIL) is a configuration problem of the relay, not of the
//     message, so it is transient too: the email is retried and goes out once
//     the operator fixes the credentials, instead of being failed for good.
//
// A message with several recipients is one transaction: a 5xx on any RCPT
// rejects the whole message (nothing was sent). A connection lost after the
// final "." but before the relay's reply is transient, so the relay may see
// that message twice; SMTP offers no way to tell.
package smtp

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mailroom/mailroom/internal/connstr"
	"github.com/mailroom/mailroom/internal/provider"
)

// Relay sends messages through one SMTP relay. It opens a connection per
// send and is safe for concurrent use.
type Relay struct {
	addr        string // host:port
	host        string
	implicitTLS bool // smtps://
	requireTLS  bool // STARTTLS even if the server does not offer it
	user, pass  string
	hasAuth     bool

	tlsConfig         *tls.Config
	dialTimeout       time.Duration
	commandTimeout    time.Duration
	submissionTimeout time.Duration // 0: go-smtp's, within the send's own deadline
	localName         string        // the name given in EHLO: the host name
	insecureAuth      bool

	// sawSTARTTLS is set once the relay has offered STARTTLS: from then on
	// STARTTLS is mandatory, so a relay (or a man in the middle) that stops
	// offering it fails the send instead of downgrading it to plaintext.
	sawSTARTTLS atomic.Bool

	redacted string
}

var _ provider.Sender = (*Relay)(nil)

// Option configures a Relay.
type Option func(*Relay)

// WithTLSConfig sets the TLS configuration for smtps and STARTTLS (e.g. a
// private CA in RootCAs). ServerName defaults to the URL's host.
func WithTLSConfig(c *tls.Config) Option { return func(r *Relay) { r.tlsConfig = c } }

// WithDialTimeout bounds the TCP connect and, for smtps, the TLS handshake.
// The default is 30 seconds.
func WithDialTimeout(d time.Duration) Option { return func(r *Relay) { r.dialTimeout = d } }

// WithCommandTimeout bounds the wait for each reply of the relay, including
// the one after the message data. The default is DefaultCommandTimeout for
// every reply but that last one, which waits as long as the send's own
// deadline allows: the relay may have taken the message already, and
// giving up on its answer sends it again.
func WithCommandTimeout(d time.Duration) Option {
	return func(r *Relay) { r.commandTimeout, r.submissionTimeout = d, d }
}

// DefaultCommandTimeout bounds the wait for the relay's greeting and each
// reply before the message data. RFC 5321 suggests minutes, for relays of
// old; a relay that is silent this long is down, and a send that waits the
// minutes out would keep its place and show nothing until it ends.
const DefaultCommandTimeout = 30 * time.Second

// WithRequireTLS makes STARTTLS mandatory for smtp:// URLs: a relay that does
// not offer it is never sent anything. Same as "?starttls=require".
func WithRequireTLS() Option { return func(r *Relay) { r.requireTLS = true } }

// WithInsecureAuth allows sending credentials over a connection without TLS
// (a relay on a trusted network that does not speak TLS). Without it, a
// URL with credentials only ever authenticates over TLS.
func WithInsecureAuth() Option { return func(r *Relay) { r.insecureAuth = true } }

// Default ports when the URL has none.
const (
	defaultSMTPPort  = "587" // submission, STARTTLS
	defaultSMTPSPort = "465" // submissions, implicit TLS
)

// New parses MAILROOM_SMTP_URL:
//
//	smtp://user:pass@host:587   STARTTLS when offered (see WithRequireTLS), AUTH
//	smtps://user:pass@host:465  implicit TLS, AUTH
//	smtp://host:25              no AUTH
//
// User and password are URL-decoded (write "@" as %40 and so on). The only
// query parameter is starttls=require. The port defaults to 587 for smtp and
// 465 for smtps. Errors never contain the password.
func New(rawURL string, opts ...Option) (*Relay, error) {
	if connstr.MisplacedCredentials(rawURL, "/?#") {
		return nil, fmt.Errorf("smtp url: %w", connstr.ErrMisplacedCredentials)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included, and an
		// escape error the escape, which may be the password's.
		var ee url.EscapeError
		if errors.As(err, &ee) {
			return nil, errors.New(`smtp url: a "%" is not followed by two hex digits (write "%" as %25)`)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("smtp url: %v", err)
	}
	r := &Relay{dialTimeout: 30 * time.Second, commandTimeout: DefaultCommandTimeout}
	switch u.Scheme {
	case "smtp":
	case "smtps":
		r.implicitTLS = true
	default:
		return nil, fmt.Errorf("smtp url: scheme %q, want smtp or smtps", u.Scheme)
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return nil, errors.New("smtp url: want scheme://[user:pass@]host[:port] with no path")
	}
	r.host = u.Hostname()
	if r.host == "" {
		return nil, errors.New("smtp url: missing host")
	}
	port := u.Port()
	if port == "" {
		port = defaultSMTPPort
		if r.implicitTLS {
			port = defaultSMTPSPort
		}
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		// url.Parse takes any digits: refused here, not at every send's dial.
		return nil, fmt.Errorf("smtp url: port %s is not between 1 and 65535", port)
	}
	r.addr = net.JoinHostPort(r.host, port)
	if u.User != nil {
		r.user = u.User.Username()
		r.pass, _ = u.User.Password()
		if r.user == "" {
			return nil, errors.New("smtp url: credentials without a user name")
		}
		r.hasAuth = true
	}
	for k, vs := range u.Query() {
		switch {
		case k == "starttls" && len(vs) == 1 && vs[0] == "require":
			if r.implicitTLS {
				return nil, errors.New("smtp url: starttls=require makes no sense with smtps")
			}
			r.requireTLS = true
		default:
			return nil, fmt.Errorf("smtp url: unknown parameter %q (only starttls=require is known)", k)
		}
	}
	for _, o := range opts {
		o(r)
	}
	r.localName = defaultLocalName()
	red := *u
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			red.User = url.UserPassword(r.user, "xxxxx")
		}
	}
	r.redacted = red.String()
	return r, nil
}

// String is the URL with the password masked, for logs.
func (r *Relay) String() string { return r.redacted }

// defaultLocalName is this machine's name when it looks like a host name.
func defaultLocalName() string {
	h, err := os.Hostname()
	if err != nil || h == "" || strings.ContainsAny(h, "\r\n ") {
		return "localhost"
	}
	return h
}

// helloName is the name given in EHLO on a connection whose own end is
// local: the machine's name when it is fully qualified, else the address
// literal of that end, which RFC 5321 (4.1.4) asks of a client without a
// name and relays that refuse bare names (a container's, a pod's) take.
func helloName(name string, local net.Addr) string {
	if strings.Contains(strings.Trim(name, "."), ".") {
		return name
	}
	tcp, ok := local.(*net.TCPAddr)
	if !ok || tcp.IP == nil {
		return name
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		return "[" + ip4.String() + "]"
	}
	return "[IPv6:" + tcp.IP.String() + "]"
}

// clientTLSConfig is the configured TLS config with ServerName filled in.
func (r *Relay) clientTLSConfig() *tls.Config {
	var c *tls.Config
	if r.tlsConfig != nil {
		c = r.tlsConfig.Clone()
	} else {
		c = &tls.Config{}
	}
	if c.ServerName == "" {
		c.ServerName = r.host
	}
	return c
}
