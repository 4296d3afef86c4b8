package app_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/config"
)

// Names are stored as given, so they must be storable text.
func TestAPIKeyNameIsStorable(t *testing.T) {
	w := newSendWorld(t)
	for _, body := range []any{
		map[string]any{"name": "build\u0000bot"},
		map[string]any{"name": "tab\there"},
		"{\"name\":\"caf\xe9\"}",
	} {
		r := w.Do("POST", "/api/auth/api-keys", w.admin, body)
		wantProblem(t, r, 422, "validation_failed")
		if !strings.Contains(string(r.Body), `"field":"name"`) {
			t.Fatalf("%v: %s", body, r.Body)
		}
	}
	if r := w.Do("POST", "/api/auth/api-keys", w.admin, map[string]any{"name": "Ümlaut — 日本"}); r.Status != 201 {
		t.Fatalf("a printable name: %d %s", r.Status, r.Body)
	}
}

// While request bodies fill MAILROOM_MAX_INFLIGHT_BYTES, a further large
// request is refused with 503 and Retry-After before its body is read, a
// streamed (chunked) one when it has filled the room; small ones still
// pass, and room comes back when requests end.
func TestInflightBytesCap(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.MaxInflightBytes = 46 << 20 })
	post := func(body io.Reader, size int64) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", w.URL+"/v1/emails/send", body)
		req.Header.Set("Authorization", "Bearer "+w.key)
		req.ContentLength = size
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	busy := func(what string, resp *http.Response) {
		t.Helper()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s: %d %v", what, resp.StatusCode, resp.Header)
		}
	}
	send := `{"from":"a@acme.test","to":"x@example.org","subject":"s","text":"t"}`
	// padded is a valid JSON body of n bytes (a send without recipients).
	padded := func(n int) *strings.Reader { return strings.NewReader(strings.Repeat(" ", n-2) + "{}") }

	// A slow upload that declares 45 MiB holds them while it lasts.
	slowBody, pw := io.Pipe()
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", w.URL+"/v1/emails/send", slowBody)
		req.Header.Set("Authorization", "Bearer "+w.key)
		req.ContentLength = 45 << 20
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	pw.Write([]byte(send[:20]))

	// A declared 5 MiB no longer fits (once the upload is admitted).
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := post(padded(5<<20), 5<<20)
		if resp.StatusCode == 503 {
			busy("5 MiB beside the slow upload", resp)
			break
		}
		if resp.StatusCode != 422 || time.Now().After(deadline) {
			t.Fatalf("5 MiB beside the slow upload: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond) // the slow upload is not admitted yet
	}
	// A small streamed body fits in the MiB left; a larger one does not.
	if resp := post(io.MultiReader(strings.NewReader(send)), -1); resp.StatusCode != 202 {
		t.Fatalf("small chunked send beside the slow upload: %d", resp.StatusCode)
	}
	// (The client sends 1.5 MiB and waits: the answer comes part way.)
	pr, pw2 := io.Pipe()
	go pw2.Write(make([]byte, 3<<19))
	req, _ := http.NewRequest("POST", w.URL+"/v1/emails/send", pr)
	req.Header.Set("Authorization", "Bearer "+w.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("streamed 1.5 MiB beside the slow upload: %v", err)
	}
	resp.Body.Close()
	pw2.CloseWithError(errors.New("refused"))
	busy("streamed 1.5 MiB beside the slow upload", resp)
	// A small send with a declared length still fits.
	if resp := post(strings.NewReader(send), int64(len(send))); resp.StatusCode != 202 {
		t.Fatalf("small send beside the slow upload: %d", resp.StatusCode)
	}

	// The upload is abandoned; its room comes back.
	pw.CloseWithError(errors.New("client gave up"))
	<-slow
	deadline = time.Now().Add(30 * time.Second)
	for {
		resp := post(padded(5<<20), 5<<20)
		if resp.StatusCode == 422 {
			break
		}
		if resp.StatusCode != 503 || time.Now().After(deadline) {
			t.Fatalf("5 MiB after the slow upload: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond) // the abandoned upload is still ending
	}
}
