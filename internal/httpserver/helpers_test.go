package httpserver

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"
)

// syncBuffer is a log sink safe for the server goroutines and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logLines parses the JSON log lines written so far.
func (b *syncBuffer) logLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

type testServer struct {
	*httptest.Server
	e       *echo.Echo
	logs    *syncBuffer
	metrics *Metrics
}

// newServer starts New(...) with a JSON logger and metrics; routes adds routes.
func newServer(t *testing.T, routes func(e *echo.Echo)) *testServer {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := NewMetrics()
	e := New(Options{Logger: logger, Metrics: m})
	if routes != nil {
		routes(e)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &testServer{Server: srv, e: e, logs: logs, metrics: m}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) problem(t *testing.T) Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != ContentTypeProblem {
		t.Fatalf("Content-Type = %q, want %q (body %s)", ct, ContentTypeProblem, r.body)
	}
	var p Problem
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decoding problem %s: %v", r.body, err)
	}
	return p
}

func (s *testServer) do(t *testing.T, method, path string, body io.Reader, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func (s *testServer) get(t *testing.T, path string) response {
	t.Helper()
	return s.do(t, http.MethodGet, path, nil, nil)
}

func (s *testServer) post(t *testing.T, path, body string) response {
	t.Helper()
	return s.do(t, http.MethodPost, path, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
}
