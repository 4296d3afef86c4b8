package smtp

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/mail"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/internal/mailmsg"
	"github.com/mailroom/mailroom/internal/nettest"
	"github.com/mailroom/mailroom/internal/provider"
)

// --- fixtures ---------------------------------------------------------------

var (
	keysOnce   sync.Once
	keyA, keyB *rsa.PrivateKey

	certOnce   sync.Once
	serverCert tls.Certificate
	roots      *x509.CertPool
)

// dkimKeys returns two 2048-bit RSA keys, made once for all tests.
func dkimKeys(t *testing.T) (*rsa.PrivateKey, *rsa.PrivateKey) {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		if keyA, err = rsa.GenerateKey(rand.Reader, dkimkey.Bits); err != nil {
			panic(err)
		}
		if keyB, err = rsa.GenerateKey(rand.Reader, dkimkey.Bits); err != nil {
			panic(err)
		}
	})
	return keyA, keyB
}

// testCert is a self-signed certificate for 127.0.0.1 and the pool that
// trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	certOnce.Do(func() {
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: "relay.test"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			BasicConstraintsValid: true,
			IsCA:                  true,
			IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:              []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
		if err != nil {
			panic(err)
		}
		leaf, err := x509.ParseCertificate(der)
		if err != nil {
			panic(err)
		}
		serverCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf}
		roots = x509.NewCertPool()
		roots.AddCert(leaf)
	})
	return serverCert, roots
}

func trustTestCA(t *testing.T) Option {
	_, pool := testCert(t)
	return WithTLSConfig(&tls.Config{RootCAs: pool})
}

// received is one message as the test relay stored it.
type received struct {
	Hello string // the name given in the last EHLO
	From  string
	To    []string
	Data  []byte
	User  string // authenticated user, "" if none
	TLS   bool
}

// backend is an in-process SMTP relay: it requires AUTH PLAIN when user is
// set, answers with canned errors where told, and stores what it accepts.
type backend struct {
	user, pass string
	mailErr    *gosmtp.SMTPError
	rcptErr    map[string]*gosmtp.SMTPError
	dataErr    *gosmtp.SMTPError

	mu   sync.Mutex
	msgs []received
}

func (b *backend) NewSession(c *gosmtp.Conn) (gosmtp.Session, error) {
	return &session{b: b, c: c}, nil
}

func (b *backend) messages() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]received(nil), b.msgs...)
}

type session struct {
	b    *backend
	c    *gosmtp.Conn
	user string
	from string
	to   []string
}

func (s *session) AuthMechanisms() []string {
	if s.b.user == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (s *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != s.b.user || pass != s.b.pass {
			// As some relays do, the refusal repeats what it was given.
			return &gosmtp.SMTPError{Code: 535, EnhancedCode: gosmtp.EnhancedCode{5, 7, 8}, Message: "Authentication credentials invalid for " + user + " with " + pass}
		}
		s.user = user
		return nil
	}), nil
}

func (s *session) Mail(from string, _ *gosmtp.MailOptions) error {
	if s.b.user != "" && s.user == "" {
		return &gosmtp.SMTPError{Code: 530, EnhancedCode: gosmtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	if s.b.mailErr != nil {
		return s.b.mailErr
	}
	s.from = from
	return nil
}

func (s *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	if e := s.b.rcptErr[to]; e != nil {
		return e
	}
	s.to = append(s.to, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.b.dataErr != nil {
		return s.b.dataErr
	}
	_, isTLS := s.c.TLSConnectionState()
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.msgs = append(s.b.msgs, received{Hello: s.c.Hostname(), From: s.from, To: s.to, Data: data, User: s.user, TLS: isTLS})
	return nil
}

func (s *session) Reset()        { s.from, s.to = "", nil }
func (s *session) Logout() error { return nil }

// Server modes.
const (
	modePlain    = "plain"    // no TLS at all
	modeSTARTTLS = "starttls" // STARTTLS offered
	modeSMTPS    = "smtps"    // implicit TLS
)

type serverOpts struct {
	addr              string // "" picks a free port
	allowInsecureAuth bool
}

// startServer runs b on 127.0.0.1 in mode and returns its address.
func startServer(t *testing.T, b *backend, mode string, o ...serverOpts) (string, func()) {
	t.Helper()
	var opt serverOpts
	if len(o) > 0 {
		opt = o[0]
	}
	s := gosmtp.NewServer(b)
	s.Domain = "relay.test"
	s.ErrorLog = log.New(io.Discard, "", 0)
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	s.AllowInsecureAuth = opt.allowInsecureAuth
	if opt.addr == "" {
		opt.addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", opt.addr)
	if err != nil {
		t.Fatal(err)
	}
	if mode != modePlain {
		cert, _ := testCert(t)
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		if mode == modeSMTPS {
			ln = tls.NewListener(ln, s.TLSConfig)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ln)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.Close()
			<-done
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

func relayURL(scheme, user, pass, addr string) string {
	u := url.URL{Scheme: scheme, Host: addr}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	return u.String()
}

func newRelay(t *testing.T, rawURL string, opts ...Option) *Relay {
	t.Helper()
	r, err := New(rawURL, append([]Option{WithDialTimeout(5 * time.Second), WithCommandTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%s): %v", rawURL, err)
	}
	return r
}

// testMessage renders a message to alice, cc bob and bcc carol.
func testMessage(t *testing.T) []byte {
	t.Helper()
	raw, err := mailmsg.Build(mailmsg.Message{
		From:      mailmsg.Address{Name: "Acme News", Email: "news@acme.test"},
		To:        []mailmsg.Address{{Name: "Alice", Email: "alice@example.net"}},
		Cc:        []mailmsg.Address{{Email: "bob@example.net"}},
		Bcc:       []mailmsg.Address{{Email: "carol@example.org"}},
		ReplyTo:   []mailmsg.Address{{Email: "support@acme.test"}},
		Subject:   "Your receipt ✓",
		Text:      "Thanks for your order.\nTotal: 12 €\n",
		HTML:      "<p>Thanks for your order.</p>\n<p>Total: 12 &euro;</p>",
		MessageID: "0190-abc@acme.test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

var recipients = []string{"alice@example.net", "bob@example.net", "carol@example.org"}

func outbound(raw []byte, key *provider.DKIMKey) provider.Outbound {
	return provider.Outbound{
		EmailID:    "0190-abc",
		From:       "bounce@send.acme.test",
		Recipients: recipients,
		Raw:        raw,
		DKIM:       key,
	}
}

// publish serves key's DKIM record for domain at selector, built the way
// the sending-domain aggregate builds it.
func publish(t *testing.T, dns *dnstest.Server, domain, selector string, key *rsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rec := sendingdomain.DKIMRecord(domain, sendingdomain.Key{Selector: selector, PublicKey: base64.StdEncoding.EncodeToString(der)})
	dns.Set(dnscheck.Record{Type: rec.Type, Name: rec.Name, Value: rec.Value})
}

// verifyDKIM checks msg's signatures, fetching keys by real DNS queries to
// the in-process server.
func verifyDKIM(t *testing.T, dns *dnstest.Server, msg []byte) []*dkim.Verification {
	t.Helper()
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dns.Addr())
	}}
	vs, err := dkim.VerifyWithOptions(bytes.NewReader(msg), &dkim.VerifyOptions{
		LookupTXT: func(name string) ([]string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return res.LookupTXT(ctx, name)
		},
	})
	if err != nil {
		t.Fatalf("dkim.Verify: %v", err)
	}
	return vs
}

// sigTags parses the DKIM-Signature header of msg into its tags.
func sigTags(t *testing.T, msg []byte) map[string]string {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	v := m.Header.Get("DKIM-Signature")
	if v == "" {
		t.Fatal("no DKIM-Signature header")
	}
	tags := map[string]string{}
	for _, kv := range strings.Split(v, ";") {
		k, val, _ := strings.Cut(kv, "=")
		tags[strings.TrimSpace(k)] = strings.Join(strings.Fields(val), "")
	}
	return tags
}

func headerSection(b []byte) string {
	h, _, _ := bytes.Cut(b, []byte("\r\n\r\n"))
	return string(h)
}

func only(t *testing.T, b *backend) received {
	t.Helper()
	msgs := b.messages()
	if len(msgs) != 1 {
		t.Fatalf("relay stored %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

func mustSend(t *testing.T, r *Relay, m provider.Outbound) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := r.Send(ctx, m)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return id
}

func sendErr(t *testing.T, r *Relay, m provider.Outbound) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := r.Send(ctx, m)
	if err == nil {
		t.Fatalf("Send succeeded (id %q), want an error", id)
	}
	return err
}

func wantTransient(t *testing.T, err error) {
	t.Helper()
	var rej *provider.RejectedError
	if errors.As(err, &rej) {
		t.Fatalf("got RejectedError %v, want a transient error", err)
	}
}

// --- tests ------------------------------------------------------------------

// The main path: STARTTLS, AUTH PLAIN, DKIM; the envelope carries every
// recipient and the signature verifies against the key served by DNS.
func TestSendSTARTTLSAuthDKIM(t *testing.T) {
	a, _ := dkimKeys(t)
	dns := dnstest.Start(t)
	publish(t, dns, "acme.test", "mrsel001", a)

	b := &backend{user: "mailroom", pass: "p@ss:w/rd"}
	addr, _ := startServer(t, b, modeSTARTTLS)
	r := newRelay(t, relayURL("smtp", b.user, b.pass, addr), trustTestCA(t))

	raw := testMessage(t)
	id := mustSend(t, r, outbound(raw, &provider.DKIMKey{Domain: "acme.test", Selector: "mrsel001", PrivateKey: a}))
	if id != "0190-abc@acme.test" {
		t.Errorf("provider message id = %q, want the Message-ID 0190-abc@acme.test", id)
	}

	got := only(t, b)
	if !got.TLS || got.User != "mailroom" {
		t.Errorf("session TLS=%v user=%q, want TLS and user mailroom", got.TLS, got.User)
	}
	if got.From != "bounce@send.acme.test" {
		t.Errorf("MAIL FROM = %q", got.From)
	}
	if strings.Join(got.To, ",") != strings.Join(recipients, ",") {
		t.Errorf("RCPT TO = %v, want %v", got.To, recipients)
	}
	hdr := headerSection(got.Data)
	if strings.Contains(hdr, "carol") || strings.Contains(strings.ToLower(hdr), "\nbcc:") {
		t.Errorf("Bcc recipient leaked into the headers:\n%s", hdr)
	}
	if !bytes.HasPrefix(got.Data, []byte("DKIM-Signature:")) || !bytes.HasSuffix(got.Data, raw) {
		t.Errorf("received data is not DKIM-Signature + the original message")
	}

	tags := sigTags(t, got.Data)
	for k, want := range map[string]string{"d": "acme.test", "s": "mrsel001", "a": "rsa-sha256", "c": "relaxed/relaxed"} {
		if tags[k] != want {
			t.Errorf("signature %s=%q, want %q", k, tags[k], want)
		}
	}
	if want := strings.Repeat(":From:To:Cc:Subject:Date:Message-ID:Reply-To:MIME-Version:Content-Type:Content-Transfer-Encoding", 2)[1:]; !strings.EqualFold(tags["h"], want) {
		t.Errorf("signature h=%q, want %q", tags["h"], want)
	}

	vs := verifyDKIM(t, dns, got.Data)
	if len(vs) != 1 || vs[0].Err != nil || vs[0].Domain != "acme.test" {
		t.Fatalf("DKIM verification = %+v (err %v), want one valid signature for acme.test", vs[0], vs[0].Err)
	}
	if udp, tcp := dns.Queries(); udp+tcp == 0 {
		t.Error("the DKIM key was not looked up through the DNS server")
	}

	// The verification is real: a changed subject breaks it.
	tampered := bytes.Replace(got.Data, []byte("Subject: "), []byte("Subject: FW: "), 1)
	if vs := verifyDKIM(t, dns, tampered); vs[0].Err == nil {
		t.Error("a tampered message still verifies")
	}
	// Nor can a second From or Subject be put above or below the signed
	// ones, nor a Cc the sender did not write.
	end := bytes.Index(got.Data, []byte("\r\n\r\n"))
	for name, added := range map[string][]byte{
		"From above":    insertAfterSignature(t, got.Data, "From: CEO <ceo@acme.test>\r\n"),
		"Subject above": insertAfterSignature(t, got.Data, "Subject: Urgent\r\n"),
		"From below":    append(append(append([]byte(nil), got.Data[:end+2]...), "From: CEO <ceo@acme.test>\r\n"...), got.Data[end+2:]...),
		"Cc":            insertAfterSignature(t, got.Data, "Cc: eve@example.net\r\n"),
		// Read through another encoding, the signed body is other text.
		"Content-Transfer-Encoding": insertAfterSignature(t, got.Data, "Content-Transfer-Encoding: base64\r\n"),
	} {
		if vs := verifyDKIM(t, dns, added); vs[0].Err == nil {
			t.Errorf("with an added header (%s) the message still verifies", name)
		}
	}
}

// insertAfterSignature puts field right after the DKIM-Signature field that
// starts data, above the fields the sender wrote.
func insertAfterSignature(t *testing.T, data []byte, field string) []byte {
	t.Helper()
	// The signature's field ends at the first line that does not fold.
	i := 0
	for {
		j := bytes.Index(data[i:], []byte("\r\n"))
		if j < 0 {
			t.Fatal("no end of the signature field")
		}
		i += j + 2
		if data[i] != ' ' && data[i] != '\t' {
			break
		}
	}
	return append(append(append([]byte(nil), data[:i]...), field...), data[i:]...)
}

// A signature by key B does not verify against a record publishing key A;
// after a rotation cutover the message is signed with the new key under the
// new selector and verifies, also once the old record is gone.
func TestDKIMWrongKeyAndRotation(t *testing.T) {
	a, bKey := dkimKeys(t)
	dns := dnstest.Start(t)
	publish(t, dns, "acme.test", "mrold001", a)

	be := &backend{}
	addr, _ := startServer(t, be, modePlain)
	r := newRelay(t, relayURL("smtp", "", "", addr))

	// Before the cutover: the old key signs and verifies.
	mustSend(t, r, outbound(testMessage(t), &provider.DKIMKey{Domain: "acme.test", Selector: "mrold001", PrivateKey: a}))
	if vs := verifyDKIM(t, dns, be.messages()[0].Data); vs[0].Err != nil {
		t.Fatalf("old key: %v", vs[0].Err)
	}

	// Wrong key: signed with B under the selector that publishes A.
	mustSend(t, r, outbound(testMessage(t), &provider.DKIMKey{Domain: "acme.test", Selector: "mrold001", PrivateKey: bKey}))
	if vs := verifyDKIM(t, dns, be.messages()[1].Data); vs[0].Err == nil {
		t.Fatal("a message signed with key B verifies against the record of key A")
	}

	// Rotation: the new key is published next to the old, then cut over.
	publish(t, dns, "acme.test", "mrnew002", bKey)
	mustSend(t, r, outbound(testMessage(t), &provider.DKIMKey{Domain: "acme.test", Selector: "mrnew002", PrivateKey: bKey}))
	rotated := be.messages()[2].Data
	if s := sigTags(t, rotated)["s"]; s != "mrnew002" {
		t.Errorf("after cutover the selector is %q, want mrnew002", s)
	}
	if vs := verifyDKIM(t, dns, rotated); vs[0].Err != nil {
		t.Fatalf("new key under the new selector: %v", vs[0].Err)
	}
	dns.Remove("mrold001._domainkey.acme.test", "TXT")
	if vs := verifyDKIM(t, dns, rotated); vs[0].Err != nil {
		t.Fatalf("new key after the old record was removed: %v", vs[0].Err)
	}
}

// 5xx on MAIL, RCPT or DATA refuses the message for good, with the reply;
// 4xx and 530 (authenticate first) are transient; 421, 451 and 452 ask to
// slow down.
func TestReplies(t *testing.T) {
	e := func(code int, ec gosmtp.EnhancedCode, msg string) *gosmtp.SMTPError {
		return &gosmtp.SMTPError{Code: code, EnhancedCode: ec, Message: msg}
	}
	cases := []struct {
		name     string
		be       *backend
		rejected bool
		want     []string
		code     string // of a rejection: what customers may see
		throttle bool
	}{
		{"rcpt 550", &backend{rcptErr: map[string]*gosmtp.SMTPError{"bob@example.net": e(550, gosmtp.EnhancedCode{5, 1, 1}, "No such user here")}},
			true, []string{"550 5.1.1 No such user here", "RCPT TO:<bob@example.net>"}, "550 5.1.1", false},
		{"rcpt 451", &backend{rcptErr: map[string]*gosmtp.SMTPError{"bob@example.net": e(451, gosmtp.EnhancedCode{4, 3, 0}, "Try again later")}},
			false, []string{"451 4.3.0 Try again later"}, "", true},
		{"rcpt 450", &backend{rcptErr: map[string]*gosmtp.SMTPError{"bob@example.net": e(450, gosmtp.EnhancedCode{4, 2, 0}, "Mailbox busy")}},
			false, []string{"450 4.2.0 Mailbox busy"}, "", false},
		{"mail 421", &backend{mailErr: e(421, gosmtp.EnhancedCode{4, 7, 0}, "Too many connections, slow down")},
			false, []string{"421 4.7.0"}, "", true},
		{"mail 553", &backend{mailErr: e(553, gosmtp.EnhancedCode{5, 7, 1}, "Sender address rejected")},
			true, []string{"553 5.7.1", "MAIL FROM:<bounce@send.acme.test>"}, "553 5.7.1", false},
		{"mail 530", &backend{mailErr: e(530, gosmtp.EnhancedCode{5, 7, 0}, "Authentication required")},
			false, []string{"530"}, "", false},
		{"data 554", &backend{dataErr: e(554, gosmtp.EnhancedCode{5, 6, 0}, "Message content rejected")},
			true, []string{"DATA: 554 5.6.0 Message content rejected"}, "554 5.6.0", false},
		{"data 452", &backend{dataErr: e(452, gosmtp.EnhancedCode{4, 3, 1}, "Insufficient system storage")},
			false, []string{"452 4.3.1"}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr, _ := startServer(t, c.be, modePlain)
			r := newRelay(t, relayURL("smtp", "", "", addr))
			err := sendErr(t, r, outbound(testMessage(t), nil))
			var rej *provider.RejectedError
			if got := errors.As(err, &rej); got != c.rejected {
				t.Fatalf("err %v: RejectedError=%v, want %v", err, got, c.rejected)
			}
			if provider.IsThrottled(err) != c.throttle {
				t.Errorf("err %v: throttled=%v, want %v", err, provider.IsThrottled(err), c.throttle)
			}
			if c.rejected && rej.Code != c.code {
				t.Errorf("code %q, want %q", rej.Code, c.code)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not contain %q", err, w)
				}
			}
			if !c.rejected {
				var re *ReplyError
				if !errors.As(err, &re) || re.Code/100 != 4 && re.Code != 530 {
					t.Errorf("err %v: want a *ReplyError with the reply code", err)
				}
			}
			if n := len(c.be.messages()); n != 0 {
				t.Errorf("relay stored %d messages", n)
			}
		})
	}
}

func TestImplicitTLS(t *testing.T) {
	b := &backend{user: "mailroom", pass: "secret"}
	addr, _ := startServer(t, b, modeSMTPS)
	r := newRelay(t, relayURL("smtps", b.user, b.pass, addr), trustTestCA(t))
	mustSend(t, r, outbound(testMessage(t), nil))
	if got := only(t, b); !got.TLS || got.User != "mailroom" || len(got.To) != 3 {
		t.Errorf("got TLS=%v user=%q rcpts=%v", got.TLS, got.User, got.To)
	}
}

// smtp://host:25: no TLS, no AUTH, and without a DKIM key the message is
// relayed byte for byte.
func TestPlainNoAuth(t *testing.T) {
	b := &backend{}
	addr, _ := startServer(t, b, modePlain)
	r := newRelay(t, "smtp://"+addr)
	raw := testMessage(t)
	mustSend(t, r, outbound(raw, nil))
	got := only(t, b)
	if got.TLS || got.User != "" {
		t.Errorf("got TLS=%v user=%q, want neither", got.TLS, got.User)
	}
	if !bytes.Equal(got.Data, raw) {
		t.Error("message changed in transit although there is no DKIM key")
	}
	if want := helloName(defaultLocalName(), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}); got.Hello != want {
		t.Errorf("EHLO %q, want %q", got.Hello, want)
	}
}

// EHLO gives a fully qualified name, as RFC 5321 asks and relays that
// check it require: the machine's when it has one, else the address
// literal of the connection's own end.
func TestHelloNameIsFullyQualifiedOrAnAddress(t *testing.T) {
	v4, v6 := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 40000}, &net.TCPAddr{IP: net.ParseIP("2001:db8::7")}
	for _, c := range []struct {
		name  string
		local net.Addr
		want  string
	}{
		{"mail-1.example.com", v4, "mail-1.example.com"},
		{"worker-7d9f8c", v4, "[192.0.2.7]"},
		{"localhost", v6, "[IPv6:2001:db8::7]"},
		{"worker-7d9f8c", nil, "worker-7d9f8c"},
	} {
		if got := helloName(c.name, c.local); got != c.want {
			t.Errorf("helloName(%q, %v) = %q, want %q", c.name, c.local, got, c.want)
		}
	}
}

// Wrong credentials are the operator's problem: transient, so the email is
// retried once the configuration is fixed.
func TestWrongCredentials(t *testing.T) {
	b := &backend{user: "mailroom", pass: "secret"}
	addr, _ := startServer(t, b, modeSTARTTLS)
	r := newRelay(t, relayURL("smtp", "mailroom", "wrong", addr), trustTestCA(t))
	err := sendErr(t, r, outbound(testMessage(t), nil))
	wantTransient(t, err)
	var re *ReplyError
	if !errors.As(err, &re) || re.Code != 535 || re.Stage != "AUTH" {
		t.Errorf("err = %v, want a 535 ReplyError at AUTH", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("error leaks the password: %v", err)
	}
	if !strings.Contains(err.Error(), "535 5.7.8") {
		t.Errorf("error lacks the reply's codes: %v", err)
	}
	if len(b.messages()) != 0 {
		t.Error("message delivered despite failed AUTH")
	}
}

// Credentials never cross a connection without TLS unless allowed.
func TestNoCredentialsInClear(t *testing.T) {
	b := &backend{user: "mailroom", pass: "secret"}
	addr, _ := startServer(t, b, modePlain, serverOpts{allowInsecureAuth: true})
	err := sendErr(t, newRelay(t, relayURL("smtp", b.user, b.pass, addr)), outbound(testMessage(t), nil))
	wantTransient(t, err)
	if !strings.Contains(err.Error(), "without TLS") {
		t.Errorf("err = %v", err)
	}
	mustSend(t, newRelay(t, relayURL("smtp", b.user, b.pass, addr), WithInsecureAuth()), outbound(testMessage(t), nil))
	if got := only(t, b); got.User != "mailroom" || got.TLS {
		t.Errorf("got user=%q TLS=%v", got.User, got.TLS)
	}
}

func TestRequireTLS(t *testing.T) {
	b := &backend{}
	addr, _ := startServer(t, b, modePlain)
	for _, r := range []*Relay{
		newRelay(t, "smtp://"+addr+"?starttls=require"),
		newRelay(t, "smtp://"+addr, WithRequireTLS()),
	} {
		err := sendErr(t, r, outbound(testMessage(t), nil))
		wantTransient(t, err)
		if !strings.Contains(err.Error(), "STARTTLS") {
			t.Errorf("err = %v", err)
		}
	}
	if len(b.messages()) != 0 {
		t.Error("message sent in plaintext although TLS was required")
	}
}

// A certificate the client does not trust fails the send (transiently).
func TestUntrustedCertificate(t *testing.T) {
	b := &backend{}
	addr, _ := startServer(t, b, modeSTARTTLS)
	err := sendErr(t, newRelay(t, "smtp://"+addr), outbound(testMessage(t), nil))
	wantTransient(t, err)
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("err = %v", err)
	}
	if len(b.messages()) != 0 {
		t.Error("message sent over an unverified connection")
	}
}

// Once a relay has offered STARTTLS, a relay at the same address that no
// longer does (a downgrade) gets nothing.
func TestSTARTTLSDowngrade(t *testing.T) {
	b1 := &backend{}
	addr, stop := startServer(t, b1, modeSTARTTLS)
	r := newRelay(t, "smtp://"+addr, trustTestCA(t))
	mustSend(t, r, outbound(testMessage(t), nil))
	if !only(t, b1).TLS {
		t.Fatal("first send did not use STARTTLS")
	}
	stop()

	b2 := &backend{}
	startServer(t, b2, modePlain, serverOpts{addr: addr})
	err := sendErr(t, r, outbound(testMessage(t), nil))
	wantTransient(t, err)
	if len(b2.messages()) != 0 {
		t.Error("message sent in plaintext after a STARTTLS downgrade")
	}
	// A fresh relay has seen no STARTTLS and sends in plaintext.
	mustSend(t, newRelay(t, "smtp://"+addr), outbound(testMessage(t), nil))
}

func TestNetworkErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	wantTransient(t, sendErr(t, newRelay(t, "smtp://"+closed), outbound(testMessage(t), nil)))

	// A peer that never greets: the context's deadline ends the send.
	silent := nettest.Silent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = newRelay(t, "smtp://"+silent).Send(ctx, outbound(testMessage(t), nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	wantTransient(t, err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Send took %v after the context expired", d)
	}
}

func TestBadEnvelope(t *testing.T) {
	r := newRelay(t, "smtp://127.0.0.1:1")
	for _, m := range []provider.Outbound{
		{From: "a@b.test", Raw: []byte("x")},
		{From: "a@b.test", Recipients: []string{"c@d.test\r\nRCPT TO:<e@f.test>"}, Raw: []byte("x")},
		{From: "", Recipients: []string{"c@d.test"}, Raw: []byte("x")},
	} {
		var rej *provider.RejectedError
		if _, err := r.Send(context.Background(), m); !errors.As(err, &rej) {
			t.Errorf("Send(%+v) = %v, want RejectedError", m, err)
		}
	}
}

func TestNew(t *testing.T) {
	ok := []struct {
		url, addr        string
		implicit, auth   bool
		requireTLS       bool
		user, pass, show string
	}{
		{"smtp://user:pass@mail.example.com:587", "mail.example.com:587", false, true, false, "user", "pass", "smtp://user:xxxxx@mail.example.com:587"},
		{"smtps://user:p%40ss%3Aw@mail.example.com", "mail.example.com:465", true, true, false, "user", "p@ss:w", "smtps://user:xxxxx@mail.example.com"},
		{"smtp://relay.internal:25", "relay.internal:25", false, false, false, "", "", "smtp://relay.internal:25"},
		{"smtp://relay.internal", "relay.internal:587", false, false, false, "", "", "smtp://relay.internal"},
		{"smtp://[::1]:2525/?starttls=require", "[::1]:2525", false, false, true, "", "", "smtp://[::1]:2525/?starttls=require"},
	}
	for _, c := range ok {
		r, err := New(c.url)
		if err != nil {
			t.Errorf("New(%q): %v", c.url, err)
			continue
		}
		if r.addr != c.addr || r.implicitTLS != c.implicit || r.hasAuth != c.auth || r.requireTLS != c.requireTLS || r.user != c.user || r.pass != c.pass {
			t.Errorf("New(%q) = addr %q implicit %v auth %v requireTLS %v user %q pass %q", c.url, r.addr, r.implicitTLS, r.hasAuth, r.requireTLS, r.user, r.pass)
		}
		if r.String() != c.show {
			t.Errorf("String() = %q, want %q", r.String(), c.show)
		}
	}
	for _, u := range []string{
		"http://mail.example.com",
		"smtp://",
		"smtp://mail.example.com/path",
		"smtp://mail.example.com?tls=on",
		"smtps://mail.example.com?starttls=require",
		"smtp://:pw@mail.example.com",
		"smtp://user:se cret%zz@mail.example.com",
		"mail.example.com:587",
		// Not percent-encoded, these end the host part early.
		"smtp://AKIAEXAMPLE:se/cret+x@email-smtp.us-east-1.amazonaws.com:587",
		"smtp://user:12345?se=cret@mail.example.com",
		"smtp://user:se#cret@mail.example.com",
		"smtp://user:secre%zt@mail.example.com",
		"smtp://mail.example.com:0",
		"smtp://mail.example.com:99999",
		"smtps://user:cret@mail.example.com:4650000000000000000000",
	} {
		_, err := New(u)
		if err == nil {
			t.Errorf("New(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "cret") || strings.Contains(err.Error(), "%zt") {
			t.Errorf("New(%q) error leaks the password: %v", u, err)
		}
	}
}

// A relay that accepts the connection and never greets is given up on
// after the command timeout, with STARTTLS required too, not after the
// send's whole deadline: the failure shows (and counts towards the
// provider failing) within seconds.
func TestARelayThatNeverGreetsIsGivenUpOnInTime(t *testing.T) {
	for _, rawURL := range []string{"smtp://" + nettest.Silent(t), "smtp://" + nettest.Silent(t) + "?starttls=require"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		_, err := newRelay(t, rawURL, WithCommandTimeout(300*time.Millisecond)).Send(ctx, outbound(testMessage(t), nil))
		if err == nil || ctx.Err() != nil {
			t.Fatalf("%s: err %v, context %v", rawURL, err, ctx.Err())
		}
		cancel()
		wantTransient(t, err)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: gave up after %v", rawURL, d)
		}
	}
}
