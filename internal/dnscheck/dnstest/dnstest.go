// Package dnstest runs a small in-process DNS server that answers from a
// mutable record set, for tests of dnscheck and for local development
// (point MAILROOM_DNS_RESOLVERS at it).
//
// It behaves like an authoritative server for whatever it holds: NXDOMAIN for
// unknown names, NOERROR with an empty answer for known names of another
// type, CNAMEs followed within its own data, TXT values split into 255-byte
// character-strings, and UDP answers truncated (TC bit) to the requester's
// buffer size so clients must retry over TCP.
package dnstest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailroom/mailroom/internal/dnscheck"
)

const ttl = 300

// Server is a DNS server on one address, serving UDP and TCP.
type Server struct {
	addr string
	udp  *dns.Server
	tcp  *dns.Server
	done chan struct{}
	once sync.Once

	mu         sync.Mutex
	records    map[key][]dnscheck.Record
	delay      time.Duration
	maxUDP     int
	failRcode  int
	ednsRcode  int  // answer to queries with OPT; 0: EDNS is understood
	dropTCP    bool // close TCP connections unanswered
	udpQueries int
	tcpQueries int
	inFlight   int
	peak       int // most queries held at once
}

type key struct {
	name string // lower-case FQDN
	typ  string // upper-case type
}

// Start starts a server on 127.0.0.1 with a random port and closes it when
// the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartStandalone("127.0.0.1:0")
	if err != nil {
		t.Fatalf("dnstest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartStandalone starts a server on addr ("host:port"; port 0 picks one
// free for both UDP and TCP). The caller must Close it.
func StartStandalone(addr string) (*Server, error) {
	pc, ln, err := listen(addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		addr:    ln.Addr().String(),
		done:    make(chan struct{}),
		records: map[key][]dnscheck.Record{},
	}
	h := dns.HandlerFunc(s.serveDNS)
	s.udp = &dns.Server{PacketConn: pc, Handler: h}
	s.tcp = &dns.Server{Listener: ln, Handler: h}
	if err := activate(s.udp); err != nil {
		pc.Close()
		ln.Close()
		return nil, err
	}
	if err := activate(s.tcp); err != nil {
		s.udp.Shutdown()
		ln.Close()
		return nil, err
	}
	return s, nil
}

// listen binds UDP and TCP to the same port, retrying when port 0 gave a
// UDP port whose TCP twin is taken.
func listen(addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	tries := 1
	if port == "0" {
		tries = 20
	}
	for i := 0; ; i++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, err
		}
		p := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
		ln, err := net.Listen("tcp", net.JoinHostPort(host, p))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if i+1 >= tries {
			return nil, nil, err
		}
	}
}

// activate serves srv in the background and waits until it is running.
func activate(srv *dns.Server) error {
	started := make(chan struct{})
	failed := make(chan error, 1)
	srv.NotifyStartedFunc = func() { close(started) }
	go func() {
		if err := srv.ActivateAndServe(); err != nil {
			failed <- err
		}
	}()
	select {
	case <-started:
		return nil
	case err := <-failed:
		return err
	}
}

// Addr returns "127.0.0.1:port" (or whatever address it was started on).
func (s *Server) Addr() string { return s.addr }

// Close stops the server, releasing any handler held up by SetDelay.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		s.udp.Shutdown()
		s.tcp.Shutdown()
	})
}

// Set replaces the records for each (name, type) pair present in records;
// other pairs are left alone.
func (s *Server) Set(records ...dnscheck.Record) {
	groups := map[key][]dnscheck.Record{}
	for _, r := range records {
		k := keyOf(r.Name, r.Type)
		groups[k] = append(groups[k], r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, rs := range groups {
		s.records[k] = rs
	}
}

// Add publishes records alongside those already held.
func (s *Server) Add(records ...dnscheck.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range records {
		k := keyOf(r.Name, r.Type)
		s.records[k] = append(s.records[k], r)
	}
}

// Remove deletes every record of type typ at name.
func (s *Server) Remove(name, typ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, keyOf(name, typ))
}

// Clear deletes all records.
func (s *Server) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = map[key][]dnscheck.Record{}
}

// SetDelay holds every answer back by d (0 answers at once), to simulate
// a slow or unreachable resolver.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetMaxUDPSize caps UDP answers at n bytes (never below 512, the DNS
// minimum), whatever buffer size the query advertises; larger answers are
// truncated with the TC bit set. 0 removes the cap.
func (s *Server) SetMaxUDPSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxUDP = n
}

// FailWith makes every answer carry rcode (e.g. dns.RcodeServerFailure)
// and no records; dns.RcodeSuccess restores normal answers.
func (s *Server) FailWith(rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failRcode = rcode
}

// RejectEDNS makes the server act as one that does not implement EDNS
// (RFC 6891 7): a query carrying an OPT record gets rcode
// (dns.RcodeFormatError, or dns.RcodeNotImplemented as some old servers
// send) with no records and no OPT; queries without OPT are answered as
// usual. dns.RcodeSuccess makes it understand EDNS again.
func (s *Server) RejectEDNS(rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ednsRcode = rcode
}

// DropTCP(true) makes every TCP query fail (the connection is closed
// unanswered), as with a resolver whose TCP port a firewall blocks; UDP
// goes on working. DropTCP(false) answers over TCP again.
func (s *Server) DropTCP(drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropTCP = drop
}

// Queries reports how many queries arrived over UDP and over TCP.
func (s *Server) Queries() (udp, tcp int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.udpQueries, s.tcpQueries
}

// PeakConcurrency reports the most queries the server was answering at
// once; with SetDelay it shows whether a client queries in parallel.
func (s *Server) PeakConcurrency() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

func keyOf(name, typ string) key {
	n := strings.ToLower(strings.TrimSpace(name))
	return key{name: dns.Fqdn(strings.TrimSuffix(n, ".")), typ: strings.ToUpper(strings.TrimSpace(typ))}
}

func (s *Server) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	_, isUDP := w.RemoteAddr().(*net.UDPAddr)

	s.mu.Lock()
	if isUDP {
		s.udpQueries++
	} else {
		s.tcpQueries++
	}
	delay, maxUDP, failRcode, ednsRcode, dropTCP := s.delay, s.maxUDP, s.failRcode, s.ednsRcode, s.dropTCP
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	if !isUDP && dropTCP {
		w.Close()
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.done:
			t.Stop()
			return
		}
	}

	resp := new(dns.Msg)
	if len(req.Question) != 1 {
		resp.SetRcode(req, dns.RcodeFormatError)
		w.WriteMsg(resp)
		return
	}
	if ednsRcode != dns.RcodeSuccess && req.IsEdns0() != nil {
		resp.SetRcode(req, ednsRcode)
		w.WriteMsg(resp)
		return
	}
	resp.SetReply(req)
	resp.Authoritative = true
	resp.RecursionAvailable = req.RecursionDesired
	if failRcode != dns.RcodeSuccess {
		resp.Rcode = failRcode
	} else {
		s.answer(resp, req.Question[0])
	}

	size := dns.MaxMsgSize
	if opt := req.IsEdns0(); opt != nil {
		resp.SetEdns0(opt.UDPSize(), false)
		if isUDP {
			size = int(opt.UDPSize())
		}
	} else if isUDP {
		size = dns.MinMsgSize
	}
	if isUDP && maxUDP > 0 && maxUDP < size {
		size = maxUDP
	}
	resp.Truncate(size)
	w.WriteMsg(resp)
}

// answer fills resp for q from the record set, following CNAMEs it holds.
func (s *Server) answer(resp *dns.Msg, q dns.Question) {
	typ := dns.TypeToString[q.Qtype]
	name := keyOf(q.Name, "").name

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.knownLocked(name) {
		resp.Rcode = dns.RcodeNameError
		return
	}
	for hops := 0; hops < 8; hops++ {
		rs := s.records[key{name, typ}]
		if len(rs) == 0 && q.Qtype != dns.TypeCNAME {
			if cn := s.records[key{name, "CNAME"}]; len(cn) > 0 {
				rr, err := toRR(name, cn[0])
				if err != nil {
					resp.Answer, resp.Rcode = nil, dns.RcodeServerFailure
					return
				}
				resp.Answer = append(resp.Answer, rr)
				name = keyOf(cn[0].Value, "").name
				if !s.knownLocked(name) {
					// The rcode is the chain's last name's (RFC 6604).
					resp.Rcode = dns.RcodeNameError
					return
				}
				continue
			}
		}
		for _, r := range rs {
			rr, err := toRR(name, r)
			if err != nil {
				resp.Answer, resp.Rcode = nil, dns.RcodeServerFailure
				return
			}
			resp.Answer = append(resp.Answer, rr)
		}
		return
	}
}

// knownLocked reports whether name has records or names below it (an empty
// non-terminal, which real DNS answers with NOERROR).
func (s *Server) knownLocked(name string) bool {
	for k, rs := range s.records {
		if len(rs) > 0 && (k.name == name || strings.HasSuffix(k.name, "."+name)) {
			return true
		}
	}
	return false
}

// toRR builds the wire record for r at owner name.
func toRR(name string, r dnscheck.Record) (dns.RR, error) {
	typ := strings.ToUpper(strings.TrimSpace(r.Type))
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	switch typ {
	case "TXT":
		return &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: splitTXT(r.Value)}, nil
	case "MX":
		if r.Priority < 0 || r.Priority > 65535 {
			return nil, fmt.Errorf("dnstest: MX priority %d out of range", r.Priority)
		}
		return &dns.MX{Hdr: hdr(dns.TypeMX), Preference: uint16(r.Priority), Mx: dns.Fqdn(strings.TrimSpace(r.Value))}, nil
	case "CNAME":
		return &dns.CNAME{Hdr: hdr(dns.TypeCNAME), Target: dns.Fqdn(strings.TrimSpace(r.Value))}, nil
	default:
		// Anything else (A, AAAA, ...) in zone-file syntax.
		rr, err := dns.NewRR(fmt.Sprintf("%s %d IN %s %s", name, ttl, typ, r.Value))
		if err == nil && rr == nil {
			err = errors.New("dnstest: empty record")
		}
		return rr, err
	}
}

// splitTXT cuts v into 255-byte character-strings, as DNS requires for long
// TXT values, escaped the way miekg/dns expects TXT strings.
func splitTXT(v string) []string {
	var parts []string
	for {
		n := min(len(v), 255)
		parts = append(parts, escapeTXT(v[:n]))
		v = v[n:]
		if v == "" {
			return parts
		}
	}
}

func escapeTXT(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c > '~':
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
