package app_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
)

// problemDetail is the detail of a problem answer.
func problemDetail(t *testing.T, r apptest.Response) string {
	t.Helper()
	d, _ := r.JSON(t)["detail"].(string)
	return d
}

func TestRateLimitPerIPBeforeAuthentication(t *testing.T) {
	s := apptest.Start(t, func(c *config.Config) { c.IPRateLimit = 0.001; c.IPRateBurst = 3 })
	_, admin := s.Account("Acme")

	// Guessed keys are answered 401 until the address has used its burst...
	bad := "mr_" + strings.Repeat("x", 40)
	for range 3 {
		wantProblem(t, s.Do("GET", "/v1/emails", bad, nil), 401, "unauthorized")
	}
	// ...then refused before any lookup, with the limit that refused.
	r := s.Do("GET", "/v1/emails", bad, nil)
	wantProblem(t, r, 429, "rate_limited")
	if !strings.Contains(problemDetail(t, r), "per IP address") || r.Header.Get("RateLimit-Limit") != "3" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("refusal: %s %v", r.Body, r.Header)
	}
	// A valid credential from the same address is refused as well, on /api too.
	wantProblem(t, s.Do("GET", "/api/auth/api-keys", admin, nil), 429, "rate_limited")
	// Probes are not limited.
	if r := s.Do("GET", "/healthz", "", nil); r.Status != 200 {
		t.Fatalf("healthz: %d", r.Status)
	}
}

func TestRateLimitPerAccount(t *testing.T) {
	s := apptest.Start(t, func(c *config.Config) {
		c.AccountRateLimit = 0.001
		c.AccountRateBurst = 4
		c.RateLimit = 0.001
		c.RateBurst = 10
	})
	accountID, admin := s.Account("Acme")
	key, err := s.Commands.CreateAPIKey(context.Background(), accountID, "k", nil, commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}

	// The account's key and token draw on one allowance.
	for _, req := range []struct{ path, credential string }{
		{"/v1/emails", key.Key}, {"/v1/emails", key.Key}, {"/api/auth/api-keys", admin},
	} {
		if r := s.Do("GET", req.path, req.credential, nil); r.Status != 200 {
			t.Fatalf("GET %s: %d %s", req.path, r.Status, r.Body)
		}
	}
	r := s.Do("GET", "/api/auth/api-keys", admin, nil)
	if r.Status != 200 || r.Header.Get("RateLimit-Limit") != "4" || r.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("fourth request: %d, headers %v", r.Status, r.Header)
	}
	r = s.Do("GET", "/v1/emails", key.Key, nil)
	wantProblem(t, r, 429, "rate_limited")
	if !strings.Contains(problemDetail(t, r), "per account") || r.Header.Get("RateLimit-Limit") != "4" {
		t.Fatalf("refusal: %s %v", r.Body, r.Header)
	}

	// Another account keeps its own allowance.
	_, other := s.Account("Other")
	if r := s.Do("GET", "/api/auth/api-keys", other, nil); r.Status != 200 || r.Header.Get("RateLimit-Remaining") != "3" {
		t.Fatalf("other account: %d %v", r.Status, r.Header)
	}
}

func TestIdleConnectionClosedByServer(t *testing.T) {
	s := apptest.Start(t, func(c *config.Config) { c.HTTPIdleTimeout = 300 * time.Millisecond })
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: mailroom\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Close {
		t.Fatalf("status %d, close %v", res.StatusCode, res.Close)
	}
	// Left idle, the connection is closed by the server (the deadline only
	// keeps a server that never closes from hanging the test).
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := rd.ReadByte(); !errors.Is(err, io.EOF) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the server kept an idle connection open")
		}
		t.Fatalf("reading an idle connection: %v", err)
	}
}
