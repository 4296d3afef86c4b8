package httpserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/logs"
)

func TestProblemConstructors(t *testing.T) {
	cases := []struct {
		name       string
		p          *Problem
		status     int
		code       string
		detail     string
		errors     int
		retryAfter string
	}{
		{"bad request", BadRequest("invalid_thing", "thing is bad"), 400, "invalid_thing", "thing is bad", 0, ""},
		{"bad request default code", BadRequest("", "x"), 400, "bad_request", "x", 0, ""},
		{"unauthorized", Unauthorized("missing key"), 401, "unauthorized", "missing key", 0, ""},
		{"forbidden", Forbidden("domain_not_verified", "verify it"), 403, "domain_not_verified", "verify it", 0, ""},
		{"not found", NotFound("no such email"), 404, "not_found", "no such email", 0, ""},
		{"conflict", Conflict("idempotency_key_reused", "different body"), 409, "idempotency_key_reused", "different body", 0, ""},
		{"validation one", Validation(FieldError{"subject", "must not be empty"}), 422, "validation_failed", "subject: must not be empty", 1, ""},
		{"validation many", Validation(FieldError{"subject", "too long"}, FieldError{"to", "required"}), 422, "validation_failed", "2 fields are invalid: subject, to", 2, ""},
		{"fields named once", Validation(FieldError{"tags", "a"}, FieldError{"tags", "b"}, FieldError{"to", "c"}), 422, "validation_failed", "2 fields are invalid: tags, to", 3, ""},
		{"one field, two errors", Validation(FieldError{"tags", "a"}, FieldError{"tags", "b"}), 422, "validation_failed", "tags is invalid: 2 errors", 2, ""},
		{"limit", LimitExceeded("at most 10 endpoints"), 422, "limit_exceeded", "at most 10 endpoints", 0, ""},
		{"too large", TooLarge("too big"), 413, "payload_too_large", "too big", 0, ""},
		{"rate limited", TooManyRequests(1500 * time.Millisecond), 429, "rate_limited", "rate limit exceeded; retry after 2 seconds", 0, "2"},
		{"rate limited floor", TooManyRequests(0), 429, "rate_limited", "rate limit exceeded; retry after 1 second", 0, "1"},
	}
	s := newServer(t, func(e *echo.Echo) {
		for i, tc := range cases {
			p := tc.p
			e.GET(fmt.Sprintf("/p/%d", i), func(c echo.Context) error { return p })
		}
	})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := s.get(t, fmt.Sprintf("/p/%d", i))
			if res.status != tc.status {
				t.Fatalf("status = %d, want %d", res.status, tc.status)
			}
			p := res.problem(t)
			if p.Status != tc.status || p.Code != tc.code || p.Detail != tc.detail {
				t.Errorf("problem = %+v, want status %d code %q detail %q", p, tc.status, tc.code, tc.detail)
			}
			if p.Type != ProblemTypeBase+tc.code {
				t.Errorf("type = %q", p.Type)
			}
			if p.Title != http.StatusText(tc.status) {
				t.Errorf("title = %q", p.Title)
			}
			if p.RequestID == "" || p.RequestID != res.header.Get(HeaderRequestID) {
				t.Errorf("request_id = %q, header %q", p.RequestID, res.header.Get(HeaderRequestID))
			}
			if len(p.Errors) != tc.errors {
				t.Errorf("errors = %v, want %d entries", p.Errors, tc.errors)
			}
			if tc.errors == 0 && strings.Contains(string(res.body), `"errors"`) {
				t.Errorf("empty errors must be omitted: %s", res.body)
			}
			if got := res.header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.retryAfter)
			}
		})
	}
	// The shared *Problem values must not have been stamped with a request id.
	for _, tc := range cases {
		if tc.p.RequestID != "" {
			t.Errorf("%s: handler's Problem was mutated", tc.name)
		}
	}
}

func TestProblemBodyShape(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/v", func(c echo.Context) error { return Validation(FieldError{"subject", "too long"}) })
	})
	res := s.get(t, "/v")
	for _, key := range []string{`"type":`, `"title":`, `"status":422`, `"detail":`, `"code":"validation_failed"`, `"request_id":`, `"errors":[{"field":"subject","message":"too long"}]`} {
		if !strings.Contains(string(res.body), key) {
			t.Errorf("body %s lacks %s", res.body, key)
		}
	}
	if strings.Contains(string(res.body), "RetryAfter") || strings.Contains(string(res.body), "retry") {
		t.Errorf("RetryAfter must not be serialised: %s", res.body)
	}
}

func TestInternalErrorHidesInternals(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/boom", func(c echo.Context) error {
			return fmt.Errorf("loading: %w", errors.New("pq: password=hunter2 host=db.internal"))
		})
	})
	res := s.get(t, "/boom")
	if res.status != 500 {
		t.Fatalf("status = %d", res.status)
	}
	p := res.problem(t)
	if p.Code != "internal_error" || p.RequestID == "" || p.RequestID != res.header.Get(HeaderRequestID) {
		t.Errorf("problem = %+v", p)
	}
	for _, secret := range []string{"hunter2", "db.internal", "pq:", "loading"} {
		if strings.Contains(string(res.body), secret) {
			t.Errorf("500 body leaks %q: %s", secret, res.body)
		}
	}
	s.Close()
	found := false
	for _, l := range s.logs.logLines(t) {
		if l["level"] == "ERROR" && l["request_id"] == p.RequestID && strings.Contains(fmt.Sprint(l["err"]), "hunter2") {
			found = true
		}
	}
	if !found {
		t.Errorf("real error not logged at error level with request_id:\n%s", s.logs.String())
	}
}

func TestPanicBecomesProblem(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/panic", func(c echo.Context) error { panic("secret panic value") })
	})
	res := s.get(t, "/panic")
	if res.status != 500 {
		t.Fatalf("status = %d", res.status)
	}
	p := res.problem(t)
	if p.Code != "internal_error" || p.RequestID == "" || strings.Contains(string(res.body), "secret") {
		t.Errorf("problem = %s", res.body)
	}
	// The inner recover lets metrics see the 500 under its route.
	if body := string(s.get(t, "/metrics").body); !strings.Contains(body, `mailroom_http_requests_total{method="GET",route="/panic",status="500"} 1`) {
		t.Errorf("panic not counted as 500:\n%s", grepLines(body, "mailroom_http_requests_total"))
	}
	s.Close()
	found := false
	for _, l := range s.logs.logLines(t) {
		if l["level"] == "ERROR" && l["request_id"] == p.RequestID && strings.Contains(fmt.Sprint(l["stack"]), "TestPanicBecomesProblem") {
			found = true
		}
	}
	if !found {
		t.Errorf("panic not logged with stack:\n%s", s.logs.String())
	}
}

func TestRequestIDOnEveryResponse(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/ok", func(c echo.Context) error {
			ids := RequestIDsOf(c)
			return c.JSON(200, map[string]string{
				"echo":   RequestIDOf(c),
				"ctx":    RequestIDFrom(c.Request().Context()),
				"server": ids.Server,
				"client": ids.Client,
			})
		})
		e.GET("/err", func(c echo.Context) error { return NotFound("nope") })
	})

	for _, path := range []string{"/ok", "/err", "/no/such/route"} {
		res := s.get(t, path)
		id := res.header.Get(HeaderRequestID)
		if !strings.HasPrefix(id, "req_") || !validRequestID(id) {
			t.Errorf("%s: X-Request-Id = %q", path, id)
		}
	}
	// Generated ids differ.
	if a, b := s.get(t, "/ok").header.Get(HeaderRequestID), s.get(t, "/ok").header.Get(HeaderRequestID); a == b {
		t.Errorf("ids repeat: %q", a)
	}

	// A sane incoming id is echoed and visible to handlers.
	res := s.do(t, "GET", "/ok", nil, map[string]string{HeaderRequestID: "client-id_1.2"})
	if got := res.header.Get(HeaderRequestID); got != "client-id_1.2" {
		t.Errorf("incoming id not echoed: %q", got)
	}
	var got map[string]string
	if err := jsonUnmarshal(res.body, &got); err != nil {
		t.Fatal(err)
	}
	if got["ctx"] != "client-id_1.2" || got["echo"] != "client-id_1.2" || got["client"] != "client-id_1.2" {
		t.Errorf("body = %s, want the client's id echoed", res.body)
	}
	// The server still makes its own id, for logs and events.
	if !strings.HasPrefix(got["server"], "req_") {
		t.Errorf("server id = %q", got["server"])
	}
	// Without an incoming id, the server's is echoed and there is no client id.
	res = s.get(t, "/ok")
	got = nil
	if err := jsonUnmarshal(res.body, &got); err != nil {
		t.Fatal(err)
	}
	if got["server"] != res.header.Get(HeaderRequestID) || got["echo"] != got["server"] || got["client"] != "" {
		t.Errorf("body = %s, header %q", res.body, res.header.Get(HeaderRequestID))
	}
	res = s.do(t, "GET", "/err", nil, map[string]string{HeaderRequestID: "client-id_1.2"})
	if p := res.problem(t); p.RequestID != "client-id_1.2" {
		t.Errorf("problem request_id = %q", p.RequestID)
	}

	// Unsafe incoming ids are replaced.
	for _, bad := range []string{"has space", "semi;colon", "<script>", strings.Repeat("a", 129)} {
		res := s.do(t, "GET", "/ok", nil, map[string]string{HeaderRequestID: bad})
		if got := res.header.Get(HeaderRequestID); got == bad || !strings.HasPrefix(got, "req_") {
			t.Errorf("unsafe id %q: got %q", bad, got)
		}
	}
	if !validRequestID(strings.Repeat("a", 128)) || validRequestID("") {
		t.Error("length bounds wrong")
	}
}

func TestRouterErrors(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/only-get", func(c echo.Context) error { return c.NoContent(204) })
	})
	res := s.get(t, "/no/such/route")
	if p := res.problem(t); res.status != 404 || p.Code != "not_found" || p.RequestID == "" {
		t.Errorf("unknown route: %d %+v", res.status, p)
	}
	res = s.do(t, "DELETE", "/only-get", nil, nil)
	if p := res.problem(t); res.status != 405 || p.Code != "method_not_allowed" {
		t.Errorf("wrong method: %d %+v", res.status, p)
	}
	if allow := res.header.Get("Allow"); !strings.Contains(allow, "GET") {
		t.Errorf("Allow = %q", allow)
	}
}

// Every answer, a refusal or a panic included, is one no cache keeps and
// no browser sniffs.
func TestAnswersArePrivate(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/secret", func(c echo.Context) error { return c.JSON(201, map[string]string{"key": "mr_x"}) })
		e.GET("/panic", func(c echo.Context) error { panic("boom") })
	})
	for _, path := range []string{"/secret", "/no/such/route", "/panic"} {
		res := s.get(t, path)
		if res.header.Get("Cache-Control") != "no-store" || res.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s (%d): Cache-Control %q, X-Content-Type-Options %q", path, res.status,
				res.header.Get("Cache-Control"), res.header.Get("X-Content-Type-Options"))
		}
	}
}

func TestHTTPErrorMapping(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		err    error
		method string
		status int
		code   string
		detail string
	}{
		{echo.NewHTTPError(400, "bad thing"), "", 400, "bad_request", "bad thing"},
		{echo.ErrUnauthorized, "", 401, "unauthorized", "Unauthorized"},
		{echo.ErrStatusRequestEntityTooLarge, "", 413, "payload_too_large", "the request body is too large"},
		{echo.ErrUnsupportedMediaType, "", 415, "unsupported_media_type", "Unsupported Media Type"},
		{echo.NewHTTPError(500, "db password=x").SetInternal(errors.New("x")), "", 500, "internal_error", ""},
		{echo.ErrServiceUnavailable, "", 503, "service_unavailable", ""},
		{fmt.Errorf("wrapped: %w", NotFound("gone")), "", 404, "not_found", "gone"},
		{&http.MaxBytesError{Limit: 1 << 20}, "", 413, "payload_too_large", "the request body exceeds the limit of 1 MiB"},
		// A read changes nothing; only a write may have been recorded.
		{fmt.Errorf("query: %w", refused), "GET", 503, "store_unavailable",
			"the database cannot be reached at the moment; retry after Retry-After seconds"},
		{fmt.Errorf("append: %w", refused), "POST", 503, "store_unavailable",
			"the database cannot be reached at the moment; retry after Retry-After seconds (a write may or may not have been recorded; a send repeated with the same Idempotency-Key is recorded once)"},
	}
	for _, tc := range cases {
		if tc.method == "" {
			tc.method = "GET"
		}
		p := toProblem(tc.err, tc.method)
		if p.Status != tc.status || p.Code != tc.code || (tc.detail != "" && p.Detail != tc.detail) {
			t.Errorf("%v => %+v, want %d %s %q", tc.err, p, tc.status, tc.code, tc.detail)
		}
		if p.Status >= 500 && strings.Contains(p.Detail, "password") {
			t.Errorf("5xx detail leaks: %q", p.Detail)
		}
	}
}

// A HEAD refused gets GET's status and headers, its length included, and
// no body.
func TestHeadGetsNoBody(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.Match(ReadMethods, "/gone", func(c echo.Context) error { return NotFound("gone") })
	})
	id := map[string]string{HeaderRequestID: "req-1"}
	get := s.do(t, "GET", "/gone", nil, id)
	res := s.do(t, "HEAD", "/gone", nil, id)
	if res.status != 404 || len(res.body) != 0 || res.header.Get(HeaderRequestID) == "" {
		t.Errorf("HEAD: %d %q %v", res.status, res.body, res.header)
	}
	if got, want := res.header.Get("Content-Length"), strconv.Itoa(len(get.body)); got != want {
		t.Errorf("HEAD's Content-Length %q, GET's body %s bytes", got, want)
	}
}

func TestErrorAfterCommitOnlyLogs(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/late", func(c echo.Context) error {
			if err := c.String(200, "partial"); err != nil {
				return err
			}
			return errors.New("stream broke")
		})
	})
	res := s.get(t, "/late")
	if res.status != 200 || string(res.body) != "partial" {
		t.Errorf("got %d %q", res.status, res.body)
	}
	s.Close()
	if !strings.Contains(s.logs.String(), "stream broke") {
		t.Errorf("late error not logged:\n%s", s.logs.String())
	}
}

func TestHealth(t *testing.T) {
	var notReady error
	var notes map[string]any
	ready := func(ctx context.Context) (map[string]any, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("no deadline on readiness context")
		}
		return notes, notReady
	}
	healthLog := &syncBuffer{}
	s := newServer(t, func(e *echo.Echo) {
		Health(e, ready, true, NewReadinessLog(slog.New(slog.NewJSONHandler(healthLog, nil))))
	})
	if res := s.get(t, "/healthz"); res.status != 200 || strings.TrimSpace(string(res.body)) != `{"status":"ok"}` {
		t.Errorf("healthz: %d %s", res.status, res.body)
	}
	if res := s.get(t, "/readyz"); res.status != 200 || strings.TrimSpace(string(res.body)) != `{"status":"ready"}` {
		t.Errorf("readyz: %d %s", res.status, res.body)
	}
	notes = map[string]any{"quarantined": []string{"emails/email-1"}}
	if res := s.get(t, "/readyz"); res.status != 200 || strings.TrimSpace(string(res.body)) != `{"quarantined":["emails/email-1"],"status":"ready"}` {
		t.Errorf("readyz with notes: %d %s", res.status, res.body)
	}
	notReady = errors.New("projections catching up: 120 events behind")
	res := s.get(t, "/readyz")
	p := res.problem(t)
	if res.status != 503 || p.Code != "not_ready" || p.Detail != notReady.Error() {
		t.Errorf("readyz not ready: %d %+v", res.status, p)
	}
	// Probes come every few seconds: the log says when readiness changes,
	// not on every probe, and a not-ready answer is no failed request.
	s.get(t, "/readyz")
	notReady = nil
	s.get(t, "/readyz")
	s.get(t, "/readyz")
	if n := strings.Count(healthLog.String(), `"msg":"not ready"`); n != 1 || !strings.Contains(healthLog.String(), "120 events behind") {
		t.Errorf("%d lines say not ready, want 1 with the reason:\n%s", n, healthLog.String())
	}
	if n := strings.Count(healthLog.String(), `"msg":"ready again"`); n != 1 {
		t.Errorf("%d lines say ready again, want 1:\n%s", n, healthLog.String())
	}
	if strings.Contains(s.logs.String(), "request failed") {
		t.Errorf("a not-ready probe was logged as a failed request:\n%s", s.logs.String())
	}
	notReady = errors.New("projections catching up: 120 events behind")

	// Without detail (a public listener beside an operator one), /readyz
	// says ready or not and nothing else.
	public := New(Options{Logger: slog.New(slog.DiscardHandler), Metrics: NewMetrics(), NoMetricsRoute: true})
	Health(public, ready, false, nil)
	if res := serve(public, "GET", "/readyz"); res.Code != 503 || strings.Contains(res.Body.String(), "120 events") {
		t.Errorf("public readyz not ready: %d %s", res.Code, res.Body)
	}
	notReady = nil
	if res := serve(public, "GET", "/readyz"); res.Code != 200 || strings.TrimSpace(res.Body.String()) != `{"status":"ready"}` {
		t.Errorf("public readyz: %d %s", res.Code, res.Body)
	}
	if res := serve(public, "GET", "/metrics"); res.Code != 404 {
		t.Errorf("/metrics with NoMetricsRoute: %d", res.Code)
	}

	// A nil readiness func is always ready.
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	Health(e, nil, true, nil)
	if res := serve(e, "GET", "/readyz"); res.Code != 200 {
		t.Errorf("nil ready: %d", res.Code)
	}
	// Without Metrics there is no /metrics route.
	if res := serve(e, "GET", "/metrics"); res.Code != 404 {
		t.Errorf("/metrics without Metrics: %d", res.Code)
	}
}

func TestRequestLogger(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		Health(e, nil, true, nil)
		e.GET("/v1/emails/:id", func(c echo.Context) error {
			AddLogAttrs(c, slog.String("account_id", "acc_1"))
			AddLogAttrs(c, slog.String("email_id", c.Param("id")))
			return c.String(200, "hello")
		})
		e.POST("/v1/emails/send", func(c echo.Context) error { return Validation(FieldError{"to", "required"}) })
	})
	ok := s.do(t, "GET", "/v1/emails/em_123", nil, map[string]string{HeaderRequestID: "log-test-1"})
	if ok.status != 200 {
		t.Fatal(ok.status)
	}
	s.post(t, "/v1/emails/send", "{}")
	s.get(t, "/healthz")
	s.get(t, "/readyz")
	s.get(t, "/metrics")
	s.Close()

	lines := s.logs.logLines(t)
	var reqLines []map[string]any
	for _, l := range lines {
		if l["msg"] == "http request" {
			reqLines = append(reqLines, l)
		}
	}
	if len(reqLines) != 2 {
		t.Fatalf("want 2 request lines (probes and scrapes skipped), got %d:\n%s", len(reqLines), s.logs.String())
	}
	l := reqLines[0]
	if l["level"] != "INFO" || l["method"] != "GET" || l["route"] != "/v1/emails/:id" || l["status"] != float64(200) ||
		l["client_request_id"] != "log-test-1" || !strings.HasPrefix(fmt.Sprint(l["request_id"]), "req_") || l["bytes"] != float64(5) ||
		l["client_ip"] != "127.0.0.1" || l["account_id"] != "acc_1" || l["email_id"] != "em_123" {
		t.Errorf("log line = %v", l)
	}
	if _, ok := l["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms missing: %v", l)
	}
	// The error status is what gets logged, not the default 200.
	if reqLines[1]["status"] != float64(422) || reqLines[1]["email_id"] != nil {
		t.Errorf("error request logged as %v", reqLines[1])
	}
}

func TestRecoverReraisesAbort(t *testing.T) {
	h := Recover()(func(c echo.Context) error { panic(http.ErrAbortHandler) })
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Errorf("recovered %v, want ErrAbortHandler re-panicked", r)
		}
	}()
	_ = h(echo.New().NewContext(nil, nil))
	t.Error("no panic")
}

// A database that cannot be reached is a 503 the client should retry, with
// Retry-After; a statement the database refuses stays an unexpected 500.
func TestUnreachableDatabaseIs503(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := newServer(t, func(e *echo.Echo) {
		e.GET("/down", func(c echo.Context) error {
			_, err := pool.Exec(c.Request().Context(), "SELECT 1")
			return err
		})
		e.GET("/refused", func(c echo.Context) error {
			return fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505", Message: "duplicate key"})
		})
		e.GET("/full", func(c echo.Context) error {
			return fmt.Errorf("append: %w", &pgconn.PgError{Code: "53100", Message: "could not extend file: No space left on device"})
		})
		e.GET("/read-only", func(c echo.Context) error {
			return fmt.Errorf("append: %w", &pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"})
		})
	})
	res := s.get(t, "/down")
	if p := res.problem(t); res.status != 503 || p.Code != "store_unavailable" || res.header.Get("Retry-After") != "5" {
		t.Fatalf("unreachable database: %d %s (Retry-After %q)", res.status, res.body, res.header.Get("Retry-After"))
	}
	// A server that cannot take writes for now (disk full, read-only) is
	// unavailable too, not a bug of this request.
	for _, path := range []string{"/full", "/read-only"} {
		if res := s.get(t, path); res.status != 503 || res.problem(t).Code != "store_unavailable" {
			t.Errorf("%s: %d %s", path, res.status, res.body)
		}
	}
	if res := s.get(t, "/refused"); res.status != 500 || res.problem(t).Code != "internal_error" {
		t.Fatalf("refused statement: %d %s", res.status, res.body)
	}
}

// A disk that is full or a process out of file descriptors, as when the
// blob directory fills, is a 503 with Retry-After the client can retry, not
// an unexpected 500.
func TestOutOfRoomIs503(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.POST("/store", func(c echo.Context) error {
			return fmt.Errorf("blob: put: %w", &fs.PathError{Op: "write", Path: "/blobs/x", Err: syscall.ENOSPC})
		})
		e.POST("/open", func(c echo.Context) error {
			return fmt.Errorf("blob: put: %w", &fs.PathError{Op: "open", Path: "/blobs/x", Err: syscall.EMFILE})
		})
	})
	for _, path := range []string{"/store", "/open"} {
		res := s.post(t, path, "{}")
		p := res.problem(t)
		if res.status != 503 || p.Code != "store_unavailable" || res.header.Get("Retry-After") != "5" ||
			!strings.Contains(p.Detail, "Idempotency-Key") || strings.Contains(p.Detail, "/blobs") {
			t.Errorf("%s: %d %s (Retry-After %q)", path, res.status, res.body, res.header.Get("Retry-After"))
		}
	}
	// Other file errors stay unexpected.
	if p := toProblem(&fs.PathError{Op: "open", Path: "/blobs/x", Err: syscall.EACCES}, "POST"); p.Status != 500 {
		t.Errorf("permission denied: %+v", p)
	}
}

// Readiness that flaps for the same reason is logged at each change, also
// through the process's logger, which folds a warning repeated within its
// window: a "ready again" never follows another without "not ready"
// between.
func TestReadinessFlappingIsLoggedAtEachChange(t *testing.T) {
	var notReady error
	ready := func(context.Context) (map[string]any, error) { return nil, notReady }
	healthLog := &syncBuffer{}
	log := slog.New(logs.Fold(slog.NewJSONHandler(healthLog, nil), time.Hour))
	s := newServer(t, func(e *echo.Echo) { Health(e, ready, true, NewReadinessLog(log)) })
	for range 2 {
		notReady = errors.New("projection emails lags more than 10000 events")
		s.get(t, "/readyz")
		notReady = nil
		s.get(t, "/readyz")
	}
	if n := strings.Count(healthLog.String(), `"msg":"not ready"`); n != 2 {
		t.Errorf("%d lines say not ready, want 2:\n%s", n, healthLog.String())
	}
	if n := strings.Count(healthLog.String(), `"msg":"ready again"`); n != 2 {
		t.Errorf("%d lines say ready again, want 2:\n%s", n, healthLog.String())
	}
}

// An instance's listeners (the API's and the operator's) share one log of
// its readiness: a change seen by both is one line, and the first answer,
// not ready, claims no time ready before it.
func TestReadinessIsLoggedOnceForAllListeners(t *testing.T) {
	notReady := errors.New("starting: migrating the database")
	ready := func(context.Context) (map[string]any, error) { return nil, notReady }
	healthLog := &syncBuffer{}
	rlog := NewReadinessLog(slog.New(slog.NewJSONHandler(healthLog, nil)))
	public := New(Options{Logger: slog.New(slog.DiscardHandler), Metrics: NewMetrics(), NoMetricsRoute: true})
	Health(public, ready, false, rlog)
	ops := New(Options{Logger: slog.New(slog.DiscardHandler), Metrics: NewMetrics()})
	Health(ops, ready, true, rlog)
	for _, e := range []*echo.Echo{public, ops, public} {
		serve(e, "GET", "/readyz")
	}
	notReady = nil
	for _, e := range []*echo.Echo{ops, public} {
		serve(e, "GET", "/readyz")
	}
	got := healthLog.String()
	if n := strings.Count(got, `"msg":"not ready"`); n != 1 || strings.Contains(got, `"ready_for"`) {
		t.Errorf("%d lines say not ready, want 1 without ready_for:\n%s", n, got)
	}
	if n := strings.Count(got, `"msg":"ready again"`); n != 1 {
		t.Errorf("%d lines say ready again, want 1:\n%s", n, got)
	}
}
