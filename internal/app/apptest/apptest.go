// Package apptest runs a whole Mailroom for tests: a fresh database, the
// projections and the HTTP API on a real loopback server.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// Server is a running Mailroom.
type Server struct {
	*app.App
	URL         string
	DatabaseURL string
	Clock       *Clock
	t           testing.TB
	stop        func()
}

// Clock runs with real time plus an offset that tests move forward instead
// of sleeping through hours.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// NewClock starts a clock at the current time.
func NewClock() *Clock { return &Clock{} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().UTC().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// MasterKey is the master key of every test server, so that servers and
// commands a test starts on one database all open what the others sealed.
const MasterKey = "7e57000000000000000000000000000000000000000000000000000000000000"

// Config returns the default configuration pointed at databaseURL, with
// local state under a temporary directory. MAILROOM_* variables of the
// environment are not applied: tests set what they need.
func Config(t testing.TB, databaseURL string) config.Config {
	var cfg config.Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.Flags(fs)
	cfg.DatabaseURL = databaseURL
	cfg.MasterKey = MasterKey
	cfg.DataDir = t.TempDir()
	// Commands given the data directory (--data-dir) read the same key.
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "master.key"), []byte(MasterKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.SandboxOutbox = cfg.DataDir + "/outbox"
	cfg.BlobDir = cfg.DataDir + "/blobs"
	cfg.RateLimit = 0
	cfg.IPRateLimit = 0
	cfg.AccountRateLimit = 0
	cfg.ProviderConcurrency = 8      // likewise, jobs in flight share the server's pool
	cfg.DNSResolvers = "127.0.0.1:9" // nothing answers: tests that check DNS start their own servers
	return cfg
}

// Start runs Mailroom on a fresh database. configure may adjust the
// configuration first.
func Start(t testing.TB, configure ...func(*config.Config)) *Server {
	t.Helper()
	url := pgtest.NewURL(t)
	cfg := Config(t, url)
	for _, f := range configure {
		f(&cfg)
	}
	return StartWith(t, cfg)
}

// StartWith runs Mailroom with cfg on its own clock.
func StartWith(t testing.TB, cfg config.Config) *Server {
	return StartWithClock(t, cfg, NewClock())
}

// StartWithClock runs Mailroom with cfg, reading time from clock, so that a
// restarted server can go on with the clock of the first.
func StartWithClock(t testing.TB, cfg config.Config, clock *Clock) *Server {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("MAILROOM_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatalf("apptest: open: %v", err)
	}
	a.Now = clock.Now
	done := make(chan error, 2)
	if cfg.Has("projections") {
		go func() { done <- a.Runner.Run(ctx) }()
	} else {
		done <- nil // an API-only instance: another process projects
	}
	if cfg.Has("workers") {
		go func() { done <- a.RunWorkers(ctx) }()
	} else {
		done <- nil
	}
	// The server Serve uses, timeouts included.
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = a.HTTPServer(a.Handler())
	srv.Start()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		srv.Close()
		cancel()
		for range 2 {
			select {
			case <-done:
			case <-time.After(40 * time.Second):
				t.Errorf("apptest: projections or workers did not stop")
			}
		}
		a.Close()
	}
	t.Cleanup(stop)
	return &Server{App: a, URL: srv.URL, DatabaseURL: cfg.DatabaseURL, Clock: clock, t: t, stop: stop}
}

// Stop shuts the server down, as a restart would; cleanup does it too.
func (s *Server) Stop() { s.stop() }

// Account creates an account and returns its id and org:admin token.
func (s *Server) Account(name string) (id, adminToken string) {
	s.t.Helper()
	acct, err := s.Commands.CreateAccount(context.Background(), name, commands.Meta{Actor: "operator"})
	if err != nil {
		s.t.Fatalf("apptest: create account: %v", err)
	}
	return acct.AccountID, acct.Token
}

// Sender creates an account with an API key holding both permissions and a
// sending domain verified the sandbox way.
func (s *Server) Sender(domain string) (accountID, admin, apiKey string) {
	s.t.Helper()
	ctx := context.Background()
	accountID, admin = s.Account("Sender " + domain)
	key, err := s.Commands.CreateAPIKey(ctx, accountID, "test", nil, commands.Meta{Actor: "operator"})
	if err != nil {
		s.t.Fatal(err)
	}
	d, err := s.Commands.AddDomain(ctx, accountID, domain, commands.Meta{Actor: "operator"})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.Commands.VerifyDomainBySandbox(ctx, d.ID, commands.Meta{Actor: "operator"}); err != nil {
		s.t.Fatal(err)
	}
	return accountID, admin, key.Key
}

// Response is a finished request.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v\n%s", r.Status, err, r.Body)
	}
	return m
}

// Do sends a request with a bearer credential (none when empty). body may
// be nil, a string or []byte sent as is, or a value encoded as JSON.
func (s *Server) Do(method, path, credential string, body any) Response {
	s.t.Helper()
	return s.DoHeader(method, path, credential, nil, body)
}

// DoHeader is Do with extra request headers.
func (s *Server) DoHeader(method, path, credential string, header http.Header, body any) Response {
	s.t.Helper()
	r, err := s.Try(method, path, credential, header, body)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// Try is DoHeader that returns a failure to get an answer (the server
// closed the connection, say) for the test to judge.
func (s *Server) Try(method, path, credential string, header http.Header, body any) (Response, error) {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if credential != "" {
		req.Header.Set("Authorization", "Bearer "+credential)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// Probe gets url as a kubelet probe does: an answer that does not come
// within its timeout is a failure. It returns the status and body, or 0 and
// the error.
func Probe(url string) (int, string) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
