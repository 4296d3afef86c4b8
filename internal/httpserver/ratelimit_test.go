package httpserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// limitedEcho serves GET /x limited by the X-Key header.
func limitedEcho(rl *RateLimiter) *echo.Echo {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	e.GET("/x", func(c echo.Context) error { return c.NoContent(204) },
		rl.Middleware(func(c echo.Context) string { return c.Request().Header.Get("X-Key") }))
	return e
}

func limitedGet(e *echo.Echo, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/x", nil)
	if key != "" {
		req.Header.Set("X-Key", key)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func TestRateLimit(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	rl := NewRateLimiter("key", 0.5, 2) // one token every 2 s, bursts of 2
	rl.now = func() time.Time { return now }
	e := limitedEcho(rl)

	check := func(rec *httptest.ResponseRecorder, status int, remaining, reset, retryAfter string) {
		t.Helper()
		if rec.Code != status {
			t.Fatalf("status = %d, want %d (%s)", rec.Code, status, rec.Body)
		}
		h := rec.Header()
		if h.Get("RateLimit-Limit") != "2" || h.Get("RateLimit-Remaining") != remaining || h.Get("RateLimit-Reset") != reset {
			t.Errorf("headers Limit=%q Remaining=%q Reset=%q, want 2 %s %s",
				h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), remaining, reset)
		}
		if got := h.Get("Retry-After"); got != retryAfter {
			t.Errorf("Retry-After = %q, want %q", got, retryAfter)
		}
		if h.Get(HeaderRequestID) == "" {
			t.Error("no request id")
		}
	}

	check(limitedGet(e, "k1"), 204, "1", "2", "")
	check(limitedGet(e, "k1"), 204, "0", "4", "")
	rec := limitedGet(e, "k1")
	check(rec, 429, "0", "2", "2")
	var p Problem
	if err := jsonUnmarshal(rec.Body.Bytes(), &p); err != nil || p.Code != "rate_limited" || rec.Header().Get("Content-Type") != ContentTypeProblem {
		t.Errorf("429 body %s (%v)", rec.Body, err)
	}
	// Another key has its own bucket.
	check(limitedGet(e, "k2"), 204, "1", "2", "")
	// No key: not limited, no headers.
	if rec := limitedGet(e, ""); rec.Code != 204 || rec.Header().Get("RateLimit-Limit") != "" {
		t.Errorf("unkeyed: %d %v", rec.Code, rec.Header())
	}

	// Half a token later: still refused, a second to wait (rounded up).
	now = now.Add(1500 * time.Millisecond)
	check(limitedGet(e, "k1"), 429, "0", "1", "1")
	// A token has arrived.
	now = now.Add(500 * time.Millisecond)
	check(limitedGet(e, "k1"), 204, "0", "4", "")
}

func TestRateLimitEvictsIdleKeys(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	rl := NewRateLimiter("key", 10, 5) // refills in 0.5 s; idle TTL 1 s
	rl.now = func() time.Time { return now }
	e := limitedEcho(rl)
	for _, k := range []string{"a", "b", "c"} {
		limitedGet(e, k)
	}
	if rl.size() != 3 {
		t.Fatalf("size = %d", rl.size())
	}
	now = now.Add(2 * time.Second)
	limitedGet(e, "d")
	if rl.size() != 1 {
		t.Errorf("idle keys not evicted: size = %d", rl.size())
	}
}

// Forgetting idle keys never hands out a fresh bucket early: a key that
// keeps asking, or pauses for less than its bucket takes to refill, has
// only the tokens that came back meanwhile.
func TestRateLimitEvictionGivesNoFreshBurst(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	remaining := func(e *echo.Echo) string {
		t.Helper()
		rec := limitedGet(e, "k")
		if rec.Code != 204 {
			t.Fatalf("refused: %d", rec.Code)
		}
		return rec.Header().Get("RateLimit-Remaining")
	}
	limiter := func() *echo.Echo {
		rl := NewRateLimiter("key", 1, 4) // refills in 4 s
		rl.now = func() time.Time { return now }
		e := limitedEcho(rl)
		for range 4 {
			remaining(e)
		}
		return e
	}

	// Asking each second, one token back each time, past the sweep of
	// idle keys at 4 s.
	e := limiter()
	for i := range 5 {
		now = now.Add(time.Second)
		if got := remaining(e); got != "0" {
			t.Fatalf("key asking each second, after %d s: remaining %s, want 0", i+1, got)
		}
	}

	// Back after 2 s of the 4: two tokens, one taken.
	now = start
	e = limiter()
	now = now.Add(2 * time.Second)
	if got := remaining(e); got != "1" {
		t.Errorf("key paused for half its refill: remaining %s, want 1", got)
	}
}

func TestRateLimitDisabled(t *testing.T) {
	for _, rl := range []*RateLimiter{NewRateLimiter("key", 0, 1), nil} {
		e := limitedEcho(rl)
		for i := 0; i < 5; i++ {
			rec := limitedGet(e, "k")
			if rec.Code != http.StatusNoContent || rec.Header().Get("RateLimit-Limit") != "" {
				t.Fatalf("disabled limiter limited: %d %v", rec.Code, rec.Header())
			}
		}
	}
}

// limitedServer serves GET /x behind per-IP limiting (burst 2, no refill
// during the test) with the given trusted proxies.
func limitedServer(t *testing.T, proxies ...netip.Prefix) *testServer {
	t.Helper()
	e := New(Options{Logger: slog.New(slog.DiscardHandler), TrustedProxies: proxies})
	perIP := NewRateLimiter("IP address", 0.001, 2).Middleware(IPKey)
	e.GET("/x", func(c echo.Context) error { return c.NoContent(204) }, perIP)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &testServer{Server: srv, e: e}
}

func TestRateLimitPerIP(t *testing.T) {
	s := limitedServer(t)
	// Without trusted proxies X-Forwarded-For is ignored: a client cannot
	// claim a fresh address with each request.
	for i, want := range []int{204, 204, 429} {
		res := s.do(t, "GET", "/x", nil, map[string]string{"X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i)})
		if res.status != want {
			t.Fatalf("request %d: status %d, want %d", i+1, res.status, want)
		}
		if want == 429 {
			p := res.problem(t)
			if p.Code != "rate_limited" || !strings.Contains(p.Detail, "per IP address") || res.header.Get("Retry-After") == "" || res.header.Get("RateLimit-Limit") != "2" {
				t.Errorf("refusal: %s %v", res.body, res.header)
			}
		}
	}
}

func TestRateLimitTrustedProxies(t *testing.T) {
	s := limitedServer(t, netip.MustParsePrefix("127.0.0.0/8"))
	get := func(xff string) int {
		t.Helper()
		return s.do(t, "GET", "/x", nil, map[string]string{"X-Forwarded-For": xff}).status
	}
	// Behind a trusted proxy, the address it forwards is the client's.
	if a, b, c := get("203.0.113.7"), get("203.0.113.7"), get("203.0.113.7"); a != 204 || b != 204 || c != 429 {
		t.Fatalf("one forwarded client: %d %d %d", a, b, c)
	}
	if got := get("203.0.113.8"); got != 204 {
		t.Fatalf("another forwarded client: %d", got)
	}
	// Addresses a client adds in front of the chain are not believed: the
	// last untrusted hop is.
	if got := get("198.51.100.1, 203.0.113.7"); got != 429 {
		t.Fatalf("a client prepending an address escaped its limit: %d", got)
	}
	// IPv6 clients count per /64.
	if a, b := get("2001:db8:1:2::1"), get("2001:db8:1:2::ffff"); a != 204 || b != 204 {
		t.Fatalf("IPv6 client: %d %d", a, b)
	}
	if got := get("2001:db8:1:2:aaaa::1"); got != 429 {
		t.Fatalf("another address of the same /64: %d", got)
	}
	if got := get("2001:db8:1:3::1"); got != 204 {
		t.Fatalf("another /64: %d", got)
	}
	// An IPv4 client forwarded as an IPv4-mapped IPv6 address counts as
	// its IPv4 address, not as one of a /64 that every such client shares.
	for _, client := range []string{"::ffff:203.0.113.9", "::ffff:203.0.113.10", "::ffff:203.0.113.11"} {
		if got := get(client); got != 204 {
			t.Fatalf("IPv4 client %s, forwarded as mapped: %d", client, got)
		}
	}
	if a, b := get("203.0.113.9"), get("203.0.113.9"); a != 204 || b != 429 {
		t.Fatalf("the first of them, forwarded as IPv4: %d %d", a, b)
	}
}

func TestRateLimitersInChain(t *testing.T) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	header := func(name string) func(echo.Context) string {
		return func(c echo.Context) string { return c.Request().Header.Get(name) }
	}
	perCredential := NewRateLimiter("credential", 0.001, 3).Middleware(header("X-Key"))
	perAccount := NewRateLimiter("account", 0.001, 4).Middleware(header("X-Account"))
	e.GET("/x", func(c echo.Context) error { return c.NoContent(204) }, perCredential, perAccount)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	s := &testServer{Server: srv, e: e}
	get := func(key string) response {
		t.Helper()
		return s.do(t, "GET", "/x", nil, map[string]string{"X-Key": key, "X-Account": "acct"})
	}
	check := func(res response, status int, limit, remaining string) {
		t.Helper()
		if res.status != status || res.header.Get("RateLimit-Limit") != limit || res.header.Get("RateLimit-Remaining") != remaining {
			t.Fatalf("status %d Limit %q Remaining %q, want %d %s %s", res.status,
				res.header.Get("RateLimit-Limit"), res.header.Get("RateLimit-Remaining"), status, limit, remaining)
		}
	}
	// The headers describe the limit closest to refusing.
	check(get("k1"), 204, "3", "2") // credential 2 left, account 3
	check(get("k1"), 204, "3", "1") // credential 1, account 2
	check(get("k2"), 204, "4", "1") // credential 2, account 1
	check(get("k2"), 204, "4", "0") // credential 1, account 0
	// The account refuses, with its own headers and scope.
	res := get("k2")
	check(res, 429, "4", "0")
	if p := res.problem(t); !strings.Contains(p.Detail, "per account") {
		t.Errorf("detail %q does not name the account limit", p.Detail)
	}
	// A credential out of tokens is refused by its own limit.
	get("k1")
	res = get("k1")
	check(res, 429, "3", "0")
	if p := res.problem(t); !strings.Contains(p.Detail, "per credential") {
		t.Errorf("detail %q does not name the credential limit", p.Detail)
	}
}
