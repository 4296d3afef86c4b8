package httpserver

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// A client that sends its whole body before it reads the answer (as
// Python's urllib and requests do) gets the refusal the server decided
// without reading the body, not a reset connection: the body is read and
// thrown away once the answer is out. So with no write timeout, where
// net/http hands the handler its own request rather than a copy.
func TestARefusalReachesAClientStillSendingItsBody(t *testing.T) {
	for _, write := range []time.Duration{time.Minute, 0} {
		t.Run(fmt.Sprintf("write timeout %s", write), func(t *testing.T) { refusalReachesAClientStillSending(t, write) })
	}
}

func refusalReachesAClientStillSending(t *testing.T, write time.Duration) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	e.POST("/refuse", func(c echo.Context) error {
		return NewProblem(http.StatusUnauthorized, "unauthorized", "no such key")
	})
	srv := startWith(t, e, Timeouts{Read: 5 * time.Minute, Write: write})
	body := bytes.Repeat([]byte("x"), 20<<20) // more than the sockets hold
	for _, c := range []struct {
		name    string
		headers string
		body    []byte
	}{
		{"with a length", fmt.Sprintf("Content-Length: %d\r\n", len(body)), body},
		{"chunked", "Transfer-Encoding: chunked\r\n", chunked(body)},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, r := dial(t, srv)
			conn.SetDeadline(time.Now().Add(30 * time.Second)) // a bound, so a stuck server fails instead of hanging
			if _, err := conn.Write([]byte("POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + c.headers + "\r\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(c.body); err != nil {
				t.Fatalf("sending the body: %v", err)
			}
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", resp.StatusCode)
			}
		})
	}

	// One that stops sending once it has the answer has all of it: the
	// answer is whole (its length given), not waiting on the drain.
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		conn, r := dial(t, srv)
		conn.SetDeadline(time.Now().Add(10 * time.Second)) // the drain would hold an unsized answer 30 s
		fmt.Fprintf(conn, "POST /refuse %s\r\nHost: x\r\nContent-Length: %d\r\n\r\n{\"a\":1", proto, len(body))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", proto, err)
		}
		problem, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(problem, []byte("no such key")) {
			t.Errorf("%s, the client sending no more: status %d, answer %q, %v", proto, resp.StatusCode, problem, err)
		}
	}

	// One that waits for 100 Continue gets the answer instead and sends
	// nothing: the server does not wait for a body that will not come.
	conn, r := dial(t, srv)
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "POST /refuse HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("answer to a request expecting 100 Continue: %v %v", resp, err)
	}
	closedByServer(t, conn, r)
}

func chunked(b []byte) []byte {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	for len(b) > 0 {
		n := min(len(b), 32<<10)
		fmt.Fprintf(w, "%x\r\n%s\r\n", n, b[:n])
		b = b[n:]
	}
	w.WriteString("0\r\n\r\n")
	w.Flush()
	return out.Bytes()
}
