// Package smtptest runs an in-process SMTP relay (a real go-smtp server on
// loopback, plain, without authentication) that keeps what it accepts, for
// tests that send through the smtp provider.
package smtptest

import (
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
)

// Message is one accepted message.
type Message struct {
	From string
	To   []string
	Data []byte
}

// Relay is a running relay.
type Relay struct {
	Addr   string
	mu     sync.Mutex
	msgs   []Message
	reject *gosmtp.SMTPError
	delay  time.Duration
	gate   <-chan struct{}
	datas  int // DATA commands answered, accepted or not
	open   int // DATA commands being received or waited on
}

// Receiving is how many messages the relay is taking in and has not yet
// answered: a sender is in the middle of handing them over.
func (r *Relay) Receiving() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

// Attempts is how many messages the relay was offered (DATA), whatever it
// answered.
func (r *Relay) Attempts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.datas
}

// Delay makes the relay wait d before answering each DATA, as a relay or
// an API across a network does.
func (r *Relay) Delay(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delay = d
}

// HoldUntil makes the relay answer no DATA until gate is closed (or for at
// most 30 s), as a relay that has stalled does.
func (r *Relay) HoldUntil(gate <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate = gate
}

// RejectData makes the relay answer every DATA with reply from now on
// (nil accepts again).
func (r *Relay) RejectData(reply *gosmtp.SMTPError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reject = reply
}

// Start runs a relay until t ends.
func Start(t testing.TB) *Relay {
	t.Helper()
	r := &Relay{}
	s := gosmtp.NewServer(r)
	s.Domain = "relay.test"
	s.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Addr = ln.Addr().String()
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return r
}

// Messages returns what the relay accepted so far.
func (r *Relay) Messages() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.msgs...)
}

// NewSession implements gosmtp.Backend.
func (r *Relay) NewSession(*gosmtp.Conn) (gosmtp.Session, error) { return &session{r: r}, nil }

type session struct {
	r    *Relay
	from string
	to   []string
}

func (s *session) Mail(from string, _ *gosmtp.MailOptions) error { s.from = from; return nil }
func (s *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}
func (s *session) Data(rd io.Reader) error {
	data, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	s.r.mu.Lock()
	delay, gate := s.r.delay, s.r.gate
	s.r.open++
	s.r.mu.Unlock()
	time.Sleep(delay)
	if gate != nil {
		select {
		case <-gate:
		case <-time.After(30 * time.Second):
		}
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.open--
	s.r.datas++
	if s.r.reject != nil {
		return s.r.reject
	}
	s.r.msgs = append(s.r.msgs, Message{From: s.from, To: s.to, Data: data})
	return nil
}
func (s *session) Reset()        { s.from, s.to = "", nil }
func (s *session) Logout() error { return nil }
