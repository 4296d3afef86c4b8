package app_test

import (
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
// request is refused with 503 and Retry-After before its body is read;
// small ones still pass, and room comes back when requests end.
func TestInflightBytesCap(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.MaxInflightBytes = 46 << 20 })
	post := func(body io.Reader, chunked bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", w.URL+"/v1/emails/send", body)
		req.Header.Set("Authorization", "Bearer "+w.key)
		if chunked {
			req.ContentLength = -1
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	send := `{"from":"a@acme.test","to":"x@example.org","subject":"s","text":"t"}`

	// A slow upload of unknown length: it counts as 45 MiB while it lasts.
	// Refused (a probe held the room as it arrived), the server may close
	// the connection while the body is still being sent: the client then
	// sees an error instead of the 503, reported here as 0.
	upload := func() (*io.PipeWriter, chan int) {
		pr, pw := io.Pipe()
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("POST", w.URL+"/v1/emails/send", pr)
			req.Header.Set("Authorization", "Bearer "+w.key)
			req.ContentLength = -1
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				pr.CloseWithError(err)
				done <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		pw.Write([]byte(send[:20]))
		return pw, done
	}
	pw, slow := upload()

	// Another body of unknown length no longer fits.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case code := <-slow:
			// The upload arrived while a probe held the room, and was
			// refused in its turn: start it again.
			if code != 503 && code != 0 {
				t.Fatalf("the slow upload ended early: %d", code)
			}
			pw.Close()
			pw, slow = upload()
		default:
		}
		resp := post(strings.NewReader("{}"), true)
		if resp.StatusCode == 503 {
			if resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("503 headers %v", resp.Header)
			}
			break
		}
		if resp.StatusCode != 422 || time.Now().After(deadline) {
			t.Fatalf("chunked request beside the slow upload: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond) // the slow upload is not admitted yet
	}
	// A small send with a declared length still fits.
	if resp := post(strings.NewReader(send), false); resp.StatusCode != 202 {
		t.Fatalf("small send beside the slow upload: %d", resp.StatusCode)
	}
	pw.Write([]byte(send[20:]))
	pw.Close()
	if got := <-slow; got != 202 {
		t.Fatalf("the slow upload: %d", got)
	}
	if resp := post(strings.NewReader("{}"), true); resp.StatusCode != 422 {
		t.Fatalf("chunked request after the slow upload: %d", resp.StatusCode)
	}
}
