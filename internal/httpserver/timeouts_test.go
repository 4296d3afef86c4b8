package httpserver

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// startWith serves e through NewServer(e, t, nil) on a loopback listener.
func startWith(t *testing.T, e *echo.Echo, timeouts Timeouts) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = NewServer(e, timeouts, nil)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// dial opens a raw connection, as a client that keeps it open would.
func dial(t *testing.T, srv *httptest.Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, bufio.NewReader(conn)
}

// closedByServer waits (at most a generous bound, so a server that never
// closes fails the test instead of hanging it) for the server to close conn.
func closedByServer(t *testing.T, conn net.Conn, r *bufio.Reader) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the server kept the connection open")
	}
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading until the server closes: %v", err)
	}
}

// A request line and headers over 64 KiB are refused before any handler
// runs; ordinary ones, long API keys included, pass.
func TestHeadersAreBounded(t *testing.T) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	Health(e, nil, true, nil)
	srv := startWith(t, e, Timeouts{})
	get := func(query string, header http.Header) int {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/healthz?"+query, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get("q="+strings.Repeat("a", 8<<10), http.Header{"Authorization": {"Bearer mr_" + strings.Repeat("k", 200)}}); s != 200 {
		t.Errorf("ordinary request: %d", s)
	}
	if s := get("q="+strings.Repeat("a", 100<<10), nil); s != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB query: %d", s)
	}
	if s := get("", http.Header{"X-Pad": {strings.Repeat("p", 100<<10)}}); s != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB header: %d", s)
	}
}

func TestIdleConnectionIsClosed(t *testing.T) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	Health(e, nil, true, nil)
	srv := startWith(t, e, Timeouts{Idle: 300 * time.Millisecond})
	conn, r := dial(t, srv)

	// Two requests on the connection: it is kept alive between them.
	for range 2 {
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: mailroom\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Close {
			t.Fatalf("status %d, close %v", res.StatusCode, res.Close)
		}
	}
	// Then left idle: the server closes it.
	closedByServer(t, conn, r)
}

func TestSlowBodyIsCutOff(t *testing.T) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	e.POST("/upload", func(c echo.Context) error {
		_, err := io.Copy(io.Discard, c.Request().Body)
		if err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	})
	srv := startWith(t, e, Timeouts{Read: 300 * time.Millisecond, Write: time.Second, Idle: time.Minute})
	conn, r := dial(t, srv)

	// A client announces a body and sends a little of it, then stalls.
	if _, err := io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: mailroom\r\nContent-Length: 1000\r\n\r\nonly a little"); err != nil {
		t.Fatal(err)
	}
	closedByServer(t, conn, r)
}

// A request whose handler waits on something that never answers (a
// database cut off) ends before the write timeout, and the client gets a
// 503 rather than a connection closed on it.
func TestStuckRequestIsAnsweredBeforeTheWriteTimeout(t *testing.T) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	e.GET("/stuck", func(c echo.Context) error {
		<-c.Request().Context().Done()
		return c.Request().Context().Err()
	})
	srv := startWith(t, e, Timeouts{Write: 2 * time.Second})
	res, err := http.Get(srv.URL + "/stuck")
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
}

// A request held inside the server past the read timeout before its body
// is read (authentication waiting on a database that answers nothing) gets
// a 503 the client retries, not a 400 blaming its body.
func TestABodyHeldPastTheReadTimeoutIsRetried(t *testing.T) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	e.POST("/send", func(c echo.Context) error {
		time.Sleep(1500 * time.Millisecond) // a lookup waiting on the database
		var v map[string]any
		if err := BindJSON(c, &v); err != nil {
			return err
		}
		return c.NoContent(http.StatusAccepted)
	})
	srv := startWith(t, e, Timeouts{Read: time.Second, Write: 10 * time.Second})
	// Larger than what arrives with the headers, so most of it is read late.
	body := `{"text":"` + strings.Repeat("x", 256<<10) + `"}`
	res, err := http.Post(srv.URL+"/send", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || !strings.Contains(string(data), `"store_unavailable"`) {
		t.Fatalf("status %d, Retry-After %q: %s", res.StatusCode, res.Header.Get("Retry-After"), data)
	}
}

// A client slow on its own (its headers, then its body, trickling in) runs
// out of the read timeout too, but nothing held it: it is not told to
// blame the database and retry.
func TestASlowClientIsNotToldTheServerHeldIt(t *testing.T) {
	for _, tc := range []struct {
		read, headers time.Duration
	}{
		{read: 2 * time.Second, headers: 1500 * time.Millisecond}, // the deadline comes soon after the read starts
		{read: 800 * time.Millisecond},                            // every read is within a second of the deadline
	} {
		e := New(Options{Logger: slog.New(slog.DiscardHandler)})
		e.POST("/send", func(c echo.Context) error {
			var v map[string]any
			if err := BindJSON(c, &v); err != nil {
				return err
			}
			return c.NoContent(http.StatusAccepted)
		})
		srv := startWith(t, e, Timeouts{Read: tc.read, Write: 30 * time.Second})
		conn, r := dial(t, srv)
		io.WriteString(conn, "POST /send HTTP/1.1\r\nHost: mailroom\r\nContent-Type: application/json\r\nContent-Length: 100\r\n")
		time.Sleep(tc.headers)
		io.WriteString(conn, "\r\n")
		go func() { // the body, a byte every 200 ms
			for range 100 {
				if _, err := io.WriteString(conn, " "); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), `"invalid_body"`) {
			t.Errorf("read timeout %v, headers after %v: %d %s", tc.read, tc.headers, res.StatusCode, data)
		}
	}
}
