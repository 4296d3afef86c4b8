package httpserver

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	rl := NewRateLimiter(0.5, 2) // one token every 2 s, bursts of 2
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
	rl := NewRateLimiter(10, 5) // refills in 0.5 s; idle TTL 1 s
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

func TestRateLimitDisabled(t *testing.T) {
	for _, rl := range []*RateLimiter{NewRateLimiter(0, 1), nil} {
		e := limitedEcho(rl)
		for i := 0; i < 5; i++ {
			rec := limitedGet(e, "k")
			if rec.Code != http.StatusNoContent || rec.Header().Get("RateLimit-Limit") != "" {
				t.Fatalf("disabled limiter limited: %d %v", rec.Code, rec.Header())
			}
		}
	}
}
