package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dnslib "github.com/miekg/dns"

	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
)

const (
	publicV4 = "93.184.216.34"
	publicV6 = "2606:2800:220:1:248:1893:25c8:1946"
)

// resolverFor returns a pure-Go resolver that asks only the test DNS server.
func resolverFor(srv *dnstest.Server) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Addr())
		},
	}
}

func a(name, value string) dnscheck.Record {
	return dnscheck.Record{Type: "A", Name: name, Value: value}
}
func aaaa(name, value string) dnscheck.Record {
	return dnscheck.Record{Type: "AAAA", Name: name, Value: value}
}

func loopback(t *testing.T) []netip.Prefix {
	t.Helper()
	p, err := ParseCIDRs("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// counting wraps h and counts the requests that reach it.
func counting(hits *atomic.Int32, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}
}

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

// tlsConfigOf is the client TLS configuration trusting srv's certificate
// (valid for 127.0.0.1, ::1 and example.com).
func tlsConfigOf(srv *httptest.Server) *tls.Config {
	return srv.Client().Transport.(*http.Transport).TLSClientConfig
}

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs(" 127.0.0.0/8 , ::1/128,,10.1.2.3, 192.168.1.7/16 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.0/8", "::1/128", "10.1.2.3/32", "192.168.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("prefix %d = %s, want %s", i, got[i], want[i])
		}
	}
	for _, empty := range []string{"", "  ", ","} {
		if got, err := ParseCIDRs(empty); err != nil || len(got) != 0 {
			t.Errorf("ParseCIDRs(%q) = %v, %v; want none", empty, got, err)
		}
	}
	for _, bad := range []string{"127.0.0.0/33", "nonsense", "10.0.0.0/8,x"} {
		if _, err := ParseCIDRs(bad); err == nil {
			t.Errorf("ParseCIDRs(%q) accepted", bad)
		}
	}
}

func TestCheckURLRefuses(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(
		a("private.example.com", "10.1.2.3"),
		a("mixed.example.com", publicV4), a("mixed.example.com", "10.0.0.5"),
		a("mixed6.example.com", publicV4), aaaa("mixed6.example.com", "fd00::1"),
		aaaa("imds.example.com", "fd00:ec2::254"),
		a("loop.example.com", "127.0.0.1"),
	)
	p := Policy{Resolver: resolverFor(dns)}

	cases := []struct {
		url  string
		want string // exact message, or "" to only require ErrRefused
	}{
		{"http://example.com/hook", "must use https"},
		{"ftp://example.com/file", "must use https"},
		{"https://user:pw@example.com/", "must not contain credentials"},
		{"https:///path", "host is required"},
		{"https://127.0.0.1/", "host is a loopback address (127.0.0.1)"},
		{"https://10.0.0.1/", "host is a private address (10.0.0.1)"},
		{"https://[::1]/", "host is a loopback address (::1)"},
		{"https://[::ffff:127.0.0.1]/", "host is a loopback address (::ffff:127.0.0.1)"},
		{"https://2130706433/", "host is a loopback address (127.0.0.1)"},
		{"https://0177.0.0.1/", "host is a loopback address (127.0.0.1)"},
		{"https://0x7f000001/", "host is a loopback address (127.0.0.1)"},
		{"https://0x7f.0.0.1/", "host is a loopback address (127.0.0.1)"},
		{"https://127.1/", "host is a loopback address (127.0.0.1)"},
		{"https://10.1/", "host is a private address (10.0.0.1)"},
		{"https://012.0x1.2/", "host is a private address (10.1.0.2)"},
		{"https://127.0.0.1./", "host is a loopback address (127.0.0.1)"},
		{"https://127.0.0.%31/", `is not a valid URL: "%31" is not a valid %-escape`},
		{"https://[zz]/", "is not a valid URL"},
		{"https://a b.test/", `is not a valid URL: its host has " ", which a host cannot`},
		{"https://4294967296/", "host is not a valid IP address"},
		{"https://1.2.3.4.5/", "host is not a valid IP address"},
		{"https://08.0.0.1/", "host is not a valid IP address"},
		{"https://localhost/", "localhost is not allowed"},
		{"https://LOCALHOST:8443/", "localhost is not allowed"},
		{"https://foo.localhost/", "localhost is not allowed"},
		{"https://printer.local/", ".local names are not allowed"},
		{"https://svc.internal/", ".internal names are not allowed"},
		{"https://intranet/", "host must be a fully qualified domain name"},
		{"https://169.254.169.254/latest/meta-data/", "host is a cloud metadata address (169.254.169.254)"},
		{"https://168.63.129.16/metadata/instance", "host is a cloud metadata address (168.63.129.16)"},
		{"https://169.254.1.1/", "host is a link-local address (169.254.1.1)"},
		{"https://100.64.0.1/", "host is a shared (CGNAT) address (100.64.0.1)"},
		{"https://[fd00::1]/", "host is a private address (fd00::1)"},
		{"https://[fd00:ec2::254]/", "host is a cloud metadata address (fd00:ec2::254)"},
		{"https://[fe80::1%25eth0]/", "host is a link-local address (fe80::1)"},
		{"https://0.0.0.0/", "host is an unspecified address (0.0.0.0)"},
		{"https://[::]/", "host is an unspecified address (::)"},
		{"https://255.255.255.255/", "host is a broadcast address (255.255.255.255)"},
		{"https://224.0.0.1/", "host is a multicast address (224.0.0.1)"},
		{"https://[ff02::1]/", "host is a multicast address (ff02::1)"},
		{"https://192.0.2.1/", ""},         // documentation
		{"https://198.18.0.1/", ""},        // benchmarking
		{"https://240.0.0.1/", ""},         // reserved
		{"https://[2001:db8::1]/", ""},     // documentation
		{"https://[64:ff9b::7f00:1]/", ""}, // NAT64 of 127.0.0.1
		{"https://[2002:7f00:1::]/", ""},   // 6to4 of 127.0.0.1
		{"https://[2001::1]/", ""},         // Teredo
		{"https://[::127.0.0.1]/", ""},     // IPv4-compatible
		{"https://example.com:0/", "invalid port (1 to 65535)"},
	}
	// Host names that resolve to non-public addresses: the customer learns
	// only that; the address goes to the operators' log.
	resolved := []struct{ url, detail string }{
		{"https://private.example.com/hook", "host resolves to a private address (10.1.2.3)"},
		{"https://mixed.example.com/hook", "host resolves to a private address (10.0.0.5)"},
		{"https://mixed6.example.com/hook", "host resolves to a private address (fd00::1)"},
		{"https://imds.example.com/hook", "host resolves to a cloud metadata address (fd00:ec2::254)"},
		{"https://loop.example.com/hook", "host resolves to a loopback address (127.0.0.1)"},
	}
	var logs bytes.Buffer
	p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	for _, c := range resolved {
		err := p.CheckURL(context.Background(), c.url)
		var re *RefusedError
		if !errors.As(err, &re) || err.Error() != "host does not resolve to a public address" || re.Detail != c.detail {
			t.Errorf("CheckURL(%q) = %v (%+v), want the generic refusal with detail %q", c.url, err, re, c.detail)
		}
		if Describe(err) != "host does not resolve to a public address" {
			t.Errorf("Describe(%q) = %q", c.url, Describe(err))
		}
		if !strings.Contains(logs.String(), c.detail) {
			t.Errorf("log lacks %q: %s", c.detail, logs.String())
		}
	}
	for _, c := range cases {
		err := p.CheckURL(context.Background(), c.url)
		if err == nil {
			t.Errorf("CheckURL(%q) accepted", c.url)
			continue
		}
		if !errors.Is(err, ErrRefused) {
			t.Errorf("CheckURL(%q) = %v; does not wrap ErrRefused", c.url, err)
		}
		if c.want != "" && err.Error() != c.want {
			t.Errorf("CheckURL(%q) = %q, want %q", c.url, err, c.want)
		}
	}
}

func TestCheckURLAccepts(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(
		a("public.example.com", publicV4), aaaa("public.example.com", publicV6),
		a("cafe.beef", publicV4),
	)
	p := Policy{Resolver: resolverFor(dns)}
	for _, u := range []string{
		"https://public.example.com/hooks/mailroom?x=1",
		"https://PUBLIC.Example.com.:8443/hook",
		"https://cafe.beef/", // hex letters, but not a number: a host name
		"https://" + publicV4 + "/",
		"https://[" + publicV6 + "]/",
		"https://[::ffff:" + publicV4 + "]/",
		"https://0x5db8d822/", // 93.184.216.34 in hex
	} {
		if err := p.CheckURL(context.Background(), u); err != nil {
			t.Errorf("CheckURL(%q) = %v", u, err)
		}
	}
}

func TestCheckURLResolutionFailures(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(dnscheck.Record{Type: "TXT", Name: "txtonly.example.com", Value: "v=spf1 -all"})
	p := Policy{Resolver: resolverFor(dns)}

	err := p.CheckURL(context.Background(), "https://nowhere.example.com/")
	if err == nil || err.Error() != "host does not resolve to a public address" {
		t.Fatalf("unknown host: %v", err)
	}
	if errors.Is(err, ErrRefused) {
		t.Error("a resolution failure is not a policy refusal")
	}
	if got := Describe(err); got != "host does not resolve to a public address" {
		t.Errorf("Describe = %q", got)
	}
	if err := p.CheckURL(context.Background(), "https://txtonly.example.com/"); err == nil || errors.Is(err, ErrLookupUnavailable) ||
		err.Error() != "host does not resolve to a public address" {
		t.Errorf("host without addresses: %v", err)
	}
	// A lookup that gets no answer says nothing of the URL: it is
	// ErrLookupUnavailable, and neither a refusal nor "does not resolve".
	dns.FailWith(dnslib.RcodeServerFailure)
	err = p.CheckURL(context.Background(), "https://nowhere.example.com/")
	if !errors.Is(err, ErrLookupUnavailable) || errors.Is(err, ErrRefused) || err.Error() != "host lookup failed" {
		t.Errorf("resolver failing: %v", err)
	}
}

func TestAllowCIDRs(t *testing.T) {
	p := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}
	for _, u := range []string{"https://127.0.0.1:8443/x", "http://127.0.0.1/x", "http://127.9.9.9:81/", "https://[::ffff:127.0.0.1]/"} {
		if err := p.CheckURL(context.Background(), u); err != nil {
			t.Errorf("CheckURL(%q) = %v", u, err)
		}
	}
	for _, u := range []string{"http://[::1]/", "https://10.0.0.1/", "https://localhost/", "http://169.254.169.254/"} {
		if err := p.CheckURL(context.Background(), u); !errors.Is(err, ErrRefused) {
			t.Errorf("CheckURL(%q) = %v; want refusal", u, err)
		}
	}
	noHTTP := Policy{AllowCIDRs: loopback(t)}
	if err := noHTTP.CheckURL(context.Background(), "http://127.0.0.1/"); err == nil || err.Error() != "must use https" {
		t.Errorf("http without AllowHTTP: %v", err)
	}
}

func TestClientConfiguration(t *testing.T) {
	c := Policy{}.Client(10 * time.Second)
	tr, isOurs := c.Transport.(*transport)
	if !isOurs {
		t.Fatalf("transport is %T", c.Transport)
	}
	if tr.base.Proxy != nil {
		t.Error("transport uses a proxy function")
	}
	if tr.base.MaxIdleConnsPerHost != maxIdleConnsPerHost || tr.base.TLSHandshakeTimeout <= 0 {
		t.Errorf("transport limits: %d per host, TLS handshake %s", tr.base.MaxIdleConnsPerHost, tr.base.TLSHandshakeTimeout)
	}
	if tr.timeout != 10*time.Second {
		t.Errorf("timeout = %s", tr.timeout)
	}
	if c.CheckRedirect == nil || c.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Error("redirects would be followed")
	}
}

func TestClientReachesAllowedServer(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(counting(&hits, ok))
	defer srv.Close()

	c := Policy{AllowCIDRs: loopback(t)}.ClientWithTLS(5*time.Second, tlsConfigOf(srv))
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" || hits.Load() != 1 {
		t.Fatalf("status %d, body %q, hits %d", resp.StatusCode, body, hits.Load())
	}
}

func TestClientRefusesPrivateDestination(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(counting(&hits, ok))
	defer srv.Close()

	c := Policy{}.ClientWithTLS(5*time.Second, tlsConfigOf(srv))
	resp, err := c.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("request to 127.0.0.1 succeeded")
	}
	if !errors.Is(err, ErrRefused) || Describe(err) != "destination not allowed" {
		t.Errorf("err = %v, Describe = %q", err, Describe(err))
	}
	if hits.Load() != 0 {
		t.Errorf("server received %d requests", hits.Load())
	}
}

func TestClientRefusesPlainHTTPUnlessAllowed(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(counting(&hits, ok))
	defer srv.Close()

	c := Policy{AllowCIDRs: loopback(t)}.Client(5 * time.Second)
	resp, err := c.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("plain http request succeeded without AllowHTTP")
	}
	if !errors.Is(err, ErrRefused) {
		t.Errorf("err = %v; want ErrRefused", err)
	}
	if hits.Load() != 0 {
		t.Errorf("server received %d requests", hits.Load())
	}

	c = Policy{AllowCIDRs: loopback(t), AllowHTTP: true}.Client(5 * time.Second)
	resp, err = c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("server received %d requests, want 1", hits.Load())
	}
}

// TestClientRefusesRebinding checks the connection-time half: a host name
// that resolved to a public address when checked and to loopback when
// dialled must not be connected to.
func TestClientRefusesRebinding(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(counting(&hits, ok))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	target := "https://example.com:" + port + "/hook" // the test certificate is valid for example.com

	dns := dnstest.Start(t)
	dns.Set(a("example.com", publicV4))
	p := Policy{Resolver: resolverFor(dns)}
	if err := p.CheckURL(context.Background(), target); err != nil {
		t.Fatalf("CheckURL at create time: %v", err)
	}

	dns.Set(a("example.com", "127.0.0.1")) // rebind
	resp, err := p.ClientWithTLS(5*time.Second, tlsConfigOf(srv)).Get(target)
	if err == nil {
		resp.Body.Close()
		t.Fatal("request to a host now resolving to 127.0.0.1 succeeded")
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("err = %v; want ErrRefused", err)
	}
	if got := Describe(err); got != "host does not resolve to a public address" {
		t.Errorf("Describe = %q", got)
	}
	if hits.Load() != 0 {
		t.Fatalf("server received %d requests", hits.Load())
	}

	// Control: the same request is fine once loopback is allowed, so the
	// refusal above came from the policy, not from DNS or TLS.
	p.AllowCIDRs = loopback(t)
	resp, err = p.ClientWithTLS(5*time.Second, tlsConfigOf(srv)).Get(target)
	if err != nil {
		t.Fatalf("allowed request: %v", err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("server received %d requests, want 1", hits.Load())
	}
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	var targetHits atomic.Int32
	target := httptest.NewServer(counting(&targetHits, ok))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusFound)
	}))
	defer redirector.Close()

	c := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}.Client(5 * time.Second)
	resp, err := c.Post(redirector.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != target.URL+"/elsewhere" {
		t.Errorf("status %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if targetHits.Load() != 0 {
		t.Errorf("redirect target received %d requests", targetHits.Load())
	}
	if got := DescribeStatus(resp.StatusCode); got != "redirect 302 not followed" {
		t.Errorf("DescribeStatus = %q", got)
	}
}

// blockUntilDone holds a handler until the client goes away (or the test
// ends), so no handler outlives its server.
func blockUntilDone(release <-chan struct{}, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-release:
	}
}

// A receiver that answers with something other than HTTP, or with more
// header than a client reads, gets a short description, not the
// transport's words.
func TestUnreadableResponsesAreDescribedBriefly(t *testing.T) {
	for _, c := range []struct {
		name, answer, want string
	}{
		{"not HTTP", "NOT HTTP AT ALL\r\n\r\n", "not a valid HTTP response"},
		{"bad header line", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "not a valid HTTP response"},
		{"headers too large", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n", "response headers too large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				http.ReadRequest(bufio.NewReader(conn))
				io.WriteString(conn, c.answer)
			}()
			p := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}
			resp, err := p.Client(5 * time.Second).Get("http://" + ln.Addr().String() + "/")
			if err == nil {
				resp.Body.Close()
				t.Fatal("the answer was read as a response")
			}
			if got := Describe(err); got != c.want {
				t.Errorf("Describe(%v) = %q, want %q", err, got, c.want)
			}
		})
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		blockUntilDone(release, r)
	})
	mux.HandleFunc("/body", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		blockUntilDone(release, r)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)

	const timeout = 50 * time.Millisecond
	p := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}
	c := p.Client(timeout)

	resp, err := c.Get(srv.URL + "/headers")
	if err == nil {
		resp.Body.Close()
		t.Fatal("request to a stalled server succeeded")
	}
	if got := Describe(err); got != "timeout after 50ms" {
		t.Errorf("Describe(awaiting headers) = %q (err %v)", got, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v is not a timeout", err)
	}

	resp, err = c.Get(srv.URL + "/body")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := Describe(err); got != "timeout after 50ms" {
		t.Errorf("Describe(reading body) = %q (err %v)", got, err)
	}

	_, err = p.Fetch(context.Background(), c, srv.URL+"/headers", 1<<20, nil)
	if got := Describe(err); got != "timeout after 50ms" {
		t.Errorf("Describe(Fetch) = %q (err %v)", got, err)
	}

	// A presigned URL's query is a credential: the error, which is logged,
	// names the URL without it.
	u := srv.URL + "/headers?X-Amz-Signature=s3cr3t#frag"
	_, err = p.Fetch(context.Background(), c, u, 1<<20, nil)
	if err == nil || !strings.Contains(err.Error(), "/headers") {
		t.Fatalf("Fetch(%s) = %v, want an error naming the path", u, err)
	}
	for _, secret := range []string{"s3cr3t", "frag"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Fetch error %q shows %q", err, secret)
		}
	}
	if got := Describe(err); got != "timeout after 50ms" {
		t.Errorf("Describe(redacted Fetch error) = %q", got)
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"https://files.example/a%20b.pdf?sig=1#x": "https://files.example/a%20b.pdf",
		"https://u:p@files.example/a.pdf":         "https://u@files.example/a.pdf",
		"https://files.example/a.pdf?":            "https://files.example/a.pdf",
		"://bad":                                  "(invalid URL)",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestFetch(t *testing.T) {
	var hits, targetHits atomic.Int32
	target := httptest.NewTLSServer(counting(&targetHits, ok))
	defer target.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("/files/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		io.WriteString(w, "%PDF-1.7")
	})
	mux.HandleFunc("/cd", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename="invoice 42.pdf"`)
		io.WriteString(w, "data")
	})
	mux.HandleFunc("/cd-star", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf`)
		io.WriteString(w, "data")
	})
	mux.HandleFunc("/cd-path", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename="../../etc/passwd"`)
		io.WriteString(w, "data")
	})
	mux.HandleFunc("/dir/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data")
	})
	mux.HandleFunc("/exact", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 100))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 101)) // Content-Length known
	})
	mux.HandleFunc("/big-chunked", func(w http.ResponseWriter, r *http.Request) {
		for range 10 {
			io.WriteString(w, strings.Repeat("x", 20))
			w.(http.Flusher).Flush() // no Content-Length
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/secret", http.StatusFound)
	})
	mux.HandleFunc("/missing", http.NotFound)
	srv := httptest.NewTLSServer(counting(&hits, mux.ServeHTTP))
	defer srv.Close()

	p := Policy{AllowCIDRs: loopback(t)}
	c := p.ClientWithTLS(5*time.Second, tlsConfigOf(srv))
	ctx := context.Background()
	const limit = 100

	good := []struct{ path, filename, body, contentType string }{
		{"/files/report%20q1.pdf", "report q1.pdf", "%PDF-1.7", "application/pdf"},
		{"/cd", "invoice 42.pdf", "data", "text/plain; charset=utf-8"},
		{"/cd-star", "résumé.pdf", "data", "text/plain; charset=utf-8"},
		{"/cd-path", "passwd", "data", "text/plain; charset=utf-8"},
		{"/dir/", "attachment", "data", "text/plain; charset=utf-8"},
		{"/exact", "exact", strings.Repeat("x", 100), "text/plain; charset=utf-8"},
	}
	for _, g := range good {
		d, err := p.Fetch(ctx, c, srv.URL+g.path, limit, nil)
		if err != nil {
			t.Errorf("Fetch(%s): %v", g.path, err)
			continue
		}
		if string(d.Body) != g.body || d.Filename != g.filename || d.ContentType != g.contentType {
			t.Errorf("Fetch(%s) = body %q, filename %q, type %q; want %q, %q, %q",
				g.path, d.Body, d.Filename, d.ContentType, g.body, g.filename, g.contentType)
		}
	}

	bad := []struct{ path, want string }{
		{"/big", "larger than 100 bytes"},
		{"/big-chunked", "larger than 100 bytes"},
		{"/redirect", "redirect 302 not followed"},
		{"/missing", "server returned 404"},
	}
	for _, b := range bad {
		_, err := p.Fetch(ctx, c, srv.URL+b.path, limit, nil)
		if err == nil {
			t.Errorf("Fetch(%s) succeeded", b.path)
			continue
		}
		if err.Error() != b.want || Describe(err) != b.want {
			t.Errorf("Fetch(%s) = %q (Describe %q), want %q", b.path, err, Describe(err), b.want)
		}
	}
	if targetHits.Load() != 0 {
		t.Errorf("redirect target received %d requests", targetHits.Load())
	}

	// Without the development allowance, loopback is refused before any
	// request is made.
	before := hits.Load()
	_, err := Policy{}.Fetch(ctx, c, srv.URL+"/files/a.pdf", limit, nil)
	if !errors.Is(err, ErrRefused) || Describe(err) != "destination not allowed" {
		t.Errorf("Fetch from loopback without allowance: %v", err)
	}
	if _, err := p.Fetch(ctx, c, strings.Replace(srv.URL, "https:", "http:", 1)+"/files/a.pdf", limit, nil); err == nil || err.Error() != "must use https" {
		t.Errorf("Fetch over http: %v", err)
	}
	if hits.Load() != before {
		t.Errorf("server received %d refused requests", hits.Load()-before)
	}
}

func TestFilenameFromURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://x.example.com/a/b/c.txt":      "c.txt",
		"https://x.example.com/a%2Fb.txt":      "b.txt",
		"https://x.example.com/a/..":           "attachment",
		"https://x.example.com/":               "attachment",
		"https://x.example.com":                "attachment",
		"https://x.example.com/caf%C3%A9.png":  "café.png",
		"https://x.example.com/x%0Ay.png?q=1":  "xy.png",
		"https://x.example.com/a%5C..%5Cb.doc": "b.doc",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := filename("", u); got != want {
			t.Errorf("filename(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestDescribe(t *testing.T) {
	p := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}
	c := p.Client(5 * time.Second)

	// Connection refused: a port nobody listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = c.Get("http://" + addr + "/")
	if got := Describe(err); got != "connection refused" {
		t.Errorf("closed port: Describe = %q (err %v)", got, err)
	}

	// Unknown host name, resolved at dial time.
	dns := dnstest.Start(t)
	p.Resolver = resolverFor(dns)
	_, err = p.Client(5 * time.Second).Get("http://nowhere.example.com:8080/")
	if got := Describe(err); got != "host does not resolve to a public address" {
		t.Errorf("unknown host: Describe = %q (err %v)", got, err)
	}

	// Untrusted certificate.
	srv := httptest.NewTLSServer(http.HandlerFunc(ok))
	defer srv.Close()
	_, err = c.Get(srv.URL)
	if got := Describe(err); got != "tls: certificate signed by unknown authority" {
		t.Errorf("untrusted certificate: Describe = %q (err %v)", got, err)
	}

	if got := Describe(nil); got != "" {
		t.Errorf("Describe(nil) = %q", got)
	}
	if got := Describe(fmt.Errorf("deliver: %w", &TooLargeError{Limit: 10})); got != "larger than 10 bytes" {
		t.Errorf("Describe(wrapped TooLargeError) = %q", got)
	}
	// Errors quoting internal addresses are described without them.
	internal := []error{
		&url.Error{Op: "Post", URL: "https://hooks.example.com/", Err: &net.OpError{Op: "dial", Net: "tcp",
			Addr: &net.TCPAddr{IP: net.ParseIP("10.96.0.7"), Port: 443}, Err: errors.New("protocol not available")}},
		&net.DNSError{Err: "dial udp 10.96.0.10:53: socket: too many open files", Name: "hooks.example.com", Server: "10.96.0.10:53"},
		&RefusedError{Reason: "destination not allowed", Detail: "destination is a private address (10.96.0.7)"},
	}
	for _, err := range internal {
		if got := Describe(err); strings.Contains(got, "10.96") || got == "" {
			t.Errorf("Describe(%v) = %q", err, got)
		}
	}
	for code, want := range map[int]string{
		200: "", 204: "", 299: "", 300: "redirect 300 not followed", 301: "redirect 301 not followed", 302: "redirect 302 not followed",
		307: "redirect 307 not followed", 308: "redirect 308 not followed", 304: "receiver returned 304",
		399: "receiver returned 399", 404: "receiver returned 404", 500: "receiver returned 500",
	} {
		if got := DescribeStatus(code); got != want {
			t.Errorf("DescribeStatus(%d) = %q, want %q", code, got, want)
		}
	}
}

// Every TCP port from 1 to 65535 is a valid webhook port; 0 and 65536 are
// not. A customer whose receiver listens on port 1 or 65535 would see the
// URL refused otherwise.
func TestCheckURLPortRange(t *testing.T) {
	p := Policy{}
	for _, port := range []string{"1", "443", "65535"} {
		if err := p.CheckURL(context.Background(), "https://"+publicV4+":"+port+"/hook"); err != nil {
			t.Errorf("port %s: %v", port, err)
		}
	}
	for _, port := range []string{"0", "65536", "99999"} {
		if err := p.CheckURL(context.Background(), "https://"+publicV4+":"+port+"/hook"); err == nil || err.Error() != "invalid port (1 to 65535)" {
			t.Errorf("port %s: %v, want the port range", port, err)
		}
	}
}

// A download of undeclared length (chunked) of exactly the limit is taken,
// as one with a Content-Length is; a byte more is refused.
func TestFetchChunkedBodyAtTheLimit(t *testing.T) {
	chunked := func(n int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < n; i += 25 {
				io.WriteString(w, strings.Repeat("x", min(25, n-i)))
				w.(http.Flusher).Flush()
			}
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/exact", chunked(100))
	mux.HandleFunc("/over", chunked(101))
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	p := Policy{AllowCIDRs: loopback(t)}
	c := p.ClientWithTLS(5*time.Second, tlsConfigOf(srv))
	if d, err := p.Fetch(context.Background(), c, srv.URL+"/exact", 100, nil); err != nil || len(d.Body) != 100 {
		t.Errorf("chunked body of exactly the limit: %d bytes, %v", len(d.Body), err)
	}
	if _, err := p.Fetch(context.Background(), c, srv.URL+"/over", 100, nil); err == nil || err.Error() != "larger than 100 bytes" {
		t.Errorf("chunked body one byte over the limit: %v", err)
	}
}

// A Content-Disposition file name that is an absolute path keeps only its
// last element, however short the path.
func TestFilenameDropsALeadingSeparator(t *testing.T) {
	for _, in := range []string{"/passwd", `\passwd`, "/etc/passwd"} {
		if got := cleanFilename(in); got != "passwd" {
			t.Errorf("cleanFilename(%q) = %q, want passwd", in, got)
		}
	}
}

// IP literals are parsed as WHATWG does: a 0 octet is a number like any
// other (93.0.216.34 is public and taken), while a part over 255 or a fifth
// part is no address at all, refused rather than wrapped around or cut.
func TestCheckURLIPv4LiteralParts(t *testing.T) {
	p := Policy{}
	if err := p.CheckURL(context.Background(), "https://93.0.216.34/hook"); err != nil {
		t.Errorf("public address with a 0 octet: %v", err)
	}
	for _, host := range []string{"256.184.216.34", "349.184.216.34", "93.184.216.34.0", "93.184.216.34.5"} {
		if err := p.CheckURL(context.Background(), "https://"+host+"/hook"); err == nil || err.Error() != "host is not a valid IP address" {
			t.Errorf("%s: %v, want \"host is not a valid IP address\"", host, err)
		}
	}
}

// A download made without a client of the caller's leaves no connection
// open behind it: the client made for it is used once, so a connection it
// kept idle would only wait, open at both ends, for the idle time-out.
func TestFetchWithoutAClientLeavesNoConnectionOpen(t *testing.T) {
	var open atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(ok))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	p := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}
	if _, err := p.Fetch(context.Background(), nil, srv.URL+"/a.pdf", 1<<20, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); open.Load() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open after the download (the idle time-out is %s)", open.Load(), idleConnTimeout)
		}
	}
}

// A client made without a timeout has no limit of its own: its requests
// go through, bounded by their context alone.
func TestClientWithoutATimeoutReachesTheServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(ok))
	defer srv.Close()
	c := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}.Client(0)
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("request through a client without a timeout: %v", err)
	}
	defer resp.Body.Close()
	if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "ok" {
		t.Errorf("body %q, %v", body, err)
	}
}

// A resolver that never answers makes CheckURL say the lookup timed out,
// and that it is worth asking again, not that the host does not exist.
func TestCheckURLLookupThatTimesOut(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	p := Policy{Resolver: &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", silent.LocalAddr().String())
		},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = p.CheckURL(ctx, "https://hooks.example.com/")
	if err == nil || err.Error() != "host lookup timed out" || !errors.Is(err, ErrLookupUnavailable) || errors.Is(err, ErrRefused) {
		t.Errorf("lookup without an answer: %v", err)
	}
}

// What a delivery record says of a receiver's certificate, of a
// connection that timed out while reading, and of a long error.
func TestDescribeCertificatesReadTimeoutsAndLongErrors(t *testing.T) {
	get := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://hooks.example.com/", Err: err}
	}
	for err, want := range map[error]string{
		get(x509.CertificateInvalidError{Reason: x509.Expired}):             "tls: certificate expired or not yet valid",
		get(x509.CertificateInvalidError{Reason: x509.NotAuthorizedToSign}): "tls: invalid certificate",
		get(&net.OpError{Op: "read", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP("10.96.0.7"), Port: 443},
			Err: os.ErrDeadlineExceeded}): "timeout",
	} {
		if got := Describe(err); got != want {
			t.Errorf("Describe(%v) = %q, want %q", err, got, want)
		}
	}
	long := strings.Repeat("é", maxDescription+1)
	if got := Describe(errors.New(long)); got != strings.Repeat("é", maxDescription-1)+"…" {
		t.Errorf("Describe of %d characters = %q (%d characters)", len([]rune(long)), got, len([]rune(got)))
	}
	exact := strings.Repeat("é", maxDescription)
	if got := Describe(errors.New(exact)); got != exact {
		t.Errorf("Describe of exactly %d characters = %q", maxDescription, got)
	}
}

// Fetch takes any 2xx and names what it refuses: a 3xx is a redirect not
// followed, a 4xx what the server returned.
func TestFetchStatusBoundaries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code)
		io.WriteString(w, "data")
	}))
	defer srv.Close()
	p := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}
	c := p.Client(5 * time.Second)
	if d, err := p.Fetch(context.Background(), c, srv.URL+"/299", 100, nil); err != nil || string(d.Body) != "data" {
		t.Errorf("Fetch of a 299: %q, %v", d.Body, err)
	}
	for code, want := range map[int]string{
		300: "redirect 300 not followed", 399: "redirect 399 not followed", 400: "server returned 400", 500: "server returned 500",
	} {
		_, err := p.Fetch(context.Background(), c, srv.URL+"/"+strconv.Itoa(code), 100, nil)
		if err == nil || Describe(err) != want {
			t.Errorf("Fetch of a %d: %v, want %q", code, err, want)
		}
	}
}

// The caller hears the length a response declares before its body is read,
// and hears nothing of a response that declares none (chunked).
func TestFetchTellsTheDeclaredLength(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/declared", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 42))
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "abc")
		w.(http.Flusher).Flush()
		io.WriteString(w, "def")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	p := Policy{AllowCIDRs: loopback(t), AllowHTTP: true}
	c := p.Client(5 * time.Second)
	var heard []int64
	declared := func(n int64) { heard = append(heard, n) }
	if _, err := p.Fetch(context.Background(), c, srv.URL+"/declared", 100, declared); err != nil {
		t.Fatal(err)
	}
	if len(heard) != 1 || heard[0] != 42 {
		t.Errorf("declared length heard: %v, want [42]", heard)
	}
	heard = nil
	if d, err := p.Fetch(context.Background(), c, srv.URL+"/chunked", 100, declared); err != nil || string(d.Body) != "abcdef" {
		t.Fatalf("chunked: %q, %v", d.Body, err)
	}
	if len(heard) != 0 {
		t.Errorf("a chunked response declared %v", heard)
	}
}

func TestCheckURLIDNHostIsLookedUpInPunycode(t *testing.T) {
	u, _ := url.Parse("https://bücher.example/hooks")
	host, _, err := (Policy{}).checkStatic(u)
	if err != nil || host != "xn--bcher-kva.example" {
		t.Fatalf("checkStatic = %q, %v; want xn--bcher-kva.example", host, err)
	}
	u, _ = url.Parse("https://ｌｏｃａｌｈｏｓｔ/hooks")
	if _, _, err := (Policy{}).checkStatic(u); err == nil {
		t.Fatal("fullwidth localhost accepted")
	}
}

// The name rules read the host as it will be looked up: a Unicode dot at
// its end (U+3002, U+FF0E, U+FF61) becomes the root's dot in punycode and
// must not hide localhost, a reserved suffix, a single label or an address.
func TestIDNHostsMeetTheNameRules(t *testing.T) {
	for _, raw := range []string{
		"https://localhost。/x", "https://ｌｏｃａｌｈｏｓｔ．/x", "https://metadata.google.internal。/x",
		"https://printer.local。/x", "https://router.home.arpa｡/x", "https://intranet。/x", "https://127。0。0。1。/x",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if host, _, err := (Policy{}).checkStatic(u); err == nil {
			t.Errorf("%s accepted as %q", raw, host)
		}
	}
}
