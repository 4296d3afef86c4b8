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
	"time"

	"github.com/labstack/echo/v4"
)

// Requests being served hold their bodies' bytes; past the cap the next one
// is refused before its body is read, and small ones still pass.
func TestInflightBytes(t *testing.T) {
	const mib = 1 << 20
	e := New(Options{Logger: slog.New(slog.DiscardHandler), MaxInflightBytes: 46 * mib})
	entered, release := make(chan struct{}, 4), make(chan struct{})
	e.POST("/hold", holding(entered, release))
	e.POST("/echo", func(c echo.Context) error {
		n, err := io.Copy(io.Discard, c.Request().Body)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]int64{"read": n})
	})
	e.GET("/ping", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	srv := httptest.NewServer(e)
	defer srv.Close()
	// Clients announcing large bodies wait for 100 Continue, as curl does,
	// so a refusal costs them no upload.
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}

	type result struct {
		status     int
		retryAfter string
		body       []byte
	}
	post := func(path string, body io.Reader, size int64) result {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, body)
		req.ContentLength = size
		if size > mib {
			req.Header.Set("Expect", "100-continue")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return result{resp.StatusCode, resp.Header.Get("Retry-After"), b}
	}
	sized := func(n int) (io.Reader, int64) { return bytes.NewReader(make([]byte, n)), int64(n) }
	chunked := func() (io.Reader, int64) { return io.MultiReader(strings.NewReader("{}")), -1 }

	// Two requests held: 2 MiB and 40 MiB of the 46 MiB.
	held := make(chan result, 2)
	for _, n := range []int{2 * mib, 40 * mib} {
		go func() { r, size := sized(n); held <- post("/hold", r, size) }()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("held request never reached its handler")
		}
	}

	wantBusy := func(what string, r result) {
		t.Helper()
		var p Problem
		json.Unmarshal(r.body, &p)
		if r.status != 503 || p.Code != "server_busy" || r.retryAfter != "1" {
			t.Errorf("%s: %d Retry-After %q %s", what, r.status, r.retryAfter, r.body)
		}
	}
	r, size := sized(5 * mib)
	wantBusy("5 MiB over the cap", post("/echo", r, size))
	// A body of unknown length takes room as it arrives: a small one
	// fits in what is left...
	r, size = chunked()
	if got := post("/echo", r, size); got.status != 200 || string(got.body) != "{\"read\":2}\n" {
		t.Errorf("small chunked body: %d %s", got.status, got.body)
	}
	// ...and a larger one is refused once it has filled the room.
	req := httptest.NewRequest("POST", "/echo", bytes.NewReader(make([]byte, 5*mib)))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	wantBusy("5 MiB chunked", result{rec.Code, rec.Header().Get("Retry-After"), rec.Body.Bytes()})
	// Small bodies still fit, and bodiless requests always pass.
	r, size = sized(1024)
	if got := post("/echo", r, size); got.status != 200 || string(got.body) != "{\"read\":1024}\n" {
		t.Errorf("small body: %d %s", got.status, got.body)
	}
	resp, err := client.Get(srv.URL + "/ping")
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("GET while full: %v %v", resp, err)
	}
	resp.Body.Close()

	close(release)
	for range 2 {
		if got := <-held; got.status != 204 {
			t.Errorf("held request: %d %s", got.status, got.body)
		}
	}
	// The room is given back when requests end.
	r, size = sized(5 * mib)
	if got := post("/echo", r, size); got.status != 200 {
		t.Errorf("5 MiB after release: %d %s", got.status, got.body)
	}
	r, size = chunked()
	if got := post("/echo", r, size); got.status != 200 {
		t.Errorf("chunked after release: %d %s", got.status, got.body)
	}
}

func TestInflightBytesDisabled(t *testing.T) {
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	e.POST("/x", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	req := httptest.NewRequest("POST", "/x", strings.NewReader("{}"))
	req.ContentLength = MaxBodyBytes
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != 204 {
		t.Errorf("no cap configured: %d", rec.Code)
	}
}

// One key's requests hold at most their share: past it that key's next
// body is refused with a 429, while another key's still pass.
func TestInflightBytesPer(t *testing.T) {
	const mib = 1 << 20
	e := echo.New()
	e.HTTPErrorHandler = New(Options{Logger: slog.New(slog.DiscardHandler)}).HTTPErrorHandler
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	// A request limiter before it, as in the API: its counts describe
	// another limit, not the one that refuses.
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set("RateLimit-Limit", "100")
			c.Response().Header().Set("RateLimit-Remaining", "99")
			return next(c)
		}
	})
	e.Use(InflightBytesPer(20*mib, func(c echo.Context) string { return c.Request().Header.Get("X-Account") }))
	e.POST("/hold", holding(entered, release))
	releaseStreamed := make(chan struct{})
	e.POST("/hold-streamed", holding(entered, releaseStreamed))
	e.POST("/echo", func(c echo.Context) error {
		io.Copy(io.Discard, c.Request().Body)
		return c.NoContent(http.StatusNoContent)
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	// post runs on other goroutines too: it reports, it does not stop
	// the test, and it shares nothing.
	post := func(path, account string, n int) (status int, p *Problem, retryAfter, limit string) {
		var body io.Reader = bytes.NewReader(make([]byte, max(n, 0)))
		if n < 0 { // a small body of undeclared length, as streaming clients send
			body = io.MultiReader(strings.NewReader("{}"))
		}
		req, _ := http.NewRequest("POST", srv.URL+path, body)
		req.Header.Set("X-Account", account)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("POST %s: %v", path, err)
			return 0, &Problem{}, "", ""
		}
		defer resp.Body.Close()
		p = &Problem{}
		json.NewDecoder(resp.Body).Decode(p)
		h := resp.Header
		return resp.StatusCode, p, h.Get("Retry-After"), h.Get("RateLimit-Limit") + " " + h.Get("RateLimit-Remaining") + " " + h.Get("RateLimit-Reset")
	}
	done := make(chan int, 2)
	for range 2 {
		go func() { s, _, _, _ := post("/hold", "a", 10*mib); done <- s }()
		<-entered
	}
	// Its RateLimit-* headers count the bytes of the limit that refused
	// it: 20 MiB, none left, room again in a second at the latest.
	if s, p, ra, limit := post("/echo", "a", mib); s != 429 || p.Code != "rate_limited" || ra != "1" || limit != "20971520 0 1" {
		t.Errorf("account a over its share: %d %q Retry-After %q RateLimit-* %q", s, p.Code, ra, limit)
	}
	if s, _, _, _ := post("/echo", "b", 10*mib); s != 204 {
		t.Errorf("account b while a is at its share: %d", s)
	}
	close(release)
	for range 2 {
		if s := <-done; s != 204 {
			t.Errorf("held request: %d", s)
		}
	}
	if s, _, _, _ := post("/echo", "a", mib); s != 204 {
		t.Errorf("account a once its requests ended: %d", s)
	}
	// Small streamed bodies hold what they have read (a step of 1 MiB),
	// not the largest body allowed: eight at once fit in a 20 MiB share.
	streamed := make(chan int, 8)
	for range 8 {
		go func() { s, _, _, _ := post("/hold-streamed", "c", -1); streamed <- s }()
		select {
		case <-entered:
		case s := <-streamed:
			t.Fatalf("streamed request answered %d before its release", s)
		case <-time.After(10 * time.Second):
			t.Fatal("streamed request never reached its handler")
		}
	}
	close(releaseStreamed)
	for range 8 {
		if s := <-streamed; s != 204 {
			t.Errorf("streamed request: %d", s)
		}
	}
}

// holding reads a request's body, says so on entered and answers 204 once
// release is closed: the request holds its room until then.
func holding(entered chan<- struct{}, release <-chan struct{}) echo.HandlerFunc {
	return func(c echo.Context) error {
		io.Copy(io.Discard, c.Request().Body)
		entered <- struct{}{}
		<-release
		return c.NoContent(http.StatusNoContent)
	}
}

// An account's large requests are served one at a time once their bodies
// are read; its small ones, another account's large one, and the upload
// of its next large one do not wait for them.
func TestLargeRequestsOfAnAccountTakeTurns(t *testing.T) {
	const mib = 1 << 20
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	entered, release := make(chan string, 8), make(chan struct{})
	e.POST("/send", func(c echo.Context) error {
		var v map[string]any
		if _, err := ReadJSON(c, &v); err != nil {
			return err
		}
		entered <- c.Request().Header.Get("Account") + " " + c.QueryParam("n")
		<-release
		return c.NoContent(http.StatusNoContent)
	}, LargeInTurns(mib, func(c echo.Context) string { return c.Request().Header.Get("Account") }))
	srv := httptest.NewServer(e)
	defer srv.Close()
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll() // before the server's Close, which waits for handlers
	body := func(size int) []byte { return []byte(`{"pad":"` + strings.Repeat("x", size) + `"}`) }
	send := func(account, n string, rd io.Reader) {
		req, _ := http.NewRequest("POST", srv.URL+"/send?n="+n, rd)
		req.Header.Set("Account", account)
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	next := func() string {
		t.Helper()
		select {
		case got := <-entered:
			return got
		case <-time.After(10 * time.Second):
			t.Fatal("no request was served")
			return ""
		}
	}
	// A large upload still arriving holds no turn.
	slow, uploading := io.Pipe()
	send("busy", "slow", slow)
	uploading.Write([]byte(`{"pad":"` + strings.Repeat("x", 2*mib)))
	send("busy", "1", bytes.NewReader(body(2*mib)))
	if got := next(); got != "busy 1" {
		t.Fatalf("first: %s", got)
	}
	uploading.Write([]byte(`"}`)) // read now, it waits for busy 1's turn
	uploading.Close()
	send("busy", "small", bytes.NewReader(body(1000)))
	send("other", "1", bytes.NewReader(body(2*mib)))
	served := map[string]bool{next(): true, next(): true}
	if !served["busy small"] || !served["other 1"] {
		t.Fatalf("served beside the busy account's large request: %v", served)
	}
	select {
	case got := <-entered:
		t.Fatalf("%s was served while the account's first large request was", got)
	case <-time.After(200 * time.Millisecond):
	}
	releaseAll() // the first ends: the account's next large one comes
	if got := next(); got != "busy slow" {
		t.Fatalf("after the first: %s", got)
	}
}
