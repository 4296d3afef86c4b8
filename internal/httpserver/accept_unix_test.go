//go:build unix

package httpserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/fdtest"
)

// A process out of file descriptors cannot accept connections: net/http
// waits and tries again, and says so as a warning of the process's logger
// (an info line would pass unseen by alerts on warnings). Once descriptors
// come back, the connection that waited is served.
func TestAcceptWithoutFileDescriptorsWarnsAndRecovers(t *testing.T) {
	logged := &syncBuffer{}
	e := echo.New()
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	srv := NewServer(e, Timeouts{}, slog.New(slog.NewJSONHandler(logged, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The client's connection waits in the listener's backlog.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// Served out of descriptors, accept gets EMFILE.
	defer srv.Close()
	fdtest.Exhausted(t, func() {
		go func() { _ = srv.Serve(ln) }()
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logged.String(), "Accept error"); {
			if time.Now().After(deadline) {
				t.Fatalf("no accept error logged: %q", logged.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	var line struct{ Level, Msg string }
	first, _, _ := strings.Cut(logged.String(), "\n")
	if err := json.Unmarshal([]byte(first), &line); err != nil {
		t.Fatal(err)
	}
	if line.Level != "WARN" || !strings.Contains(line.Msg, "too many open files") {
		t.Errorf("accept failure logged as %s %q, want WARN naming the cause", line.Level, line.Msg)
	}

	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the waiting connection was not served once descriptors came back: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d", res.StatusCode)
	}
}
