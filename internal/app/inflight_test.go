package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
)

// One account's slow uploads hold at most its share of the room for
// request bodies: its next large send is refused with a 429 while another
// account's requests still go through.
func TestSlowUploadsOfOneAccountLeaveRoomForOthers(t *testing.T) {
	const mib = 1 << 20
	s := apptest.Start(t, func(c *config.Config) { c.MaxInflightBytes = 200 * mib }) // a share of 50 MiB
	_, _, keyA := s.Sender("a.test")
	_, adminB, keyB := s.Sender("b.test")

	// A declares a 45 MiB body and sends it a trickle at a time.
	body, writer := io.Pipe()
	defer writer.Close()
	slow, _ := http.NewRequest("POST", s.URL+"/v1/emails/send", body)
	slow.ContentLength = 45 * mib
	slow.Header.Set("Authorization", "Bearer "+keyA)
	slow.Header.Set("Content-Type", "application/json")
	slowDone := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(slow)
		if err == nil {
			resp.Body.Close()
		}
		slowDone <- err
	}()
	// More than the connection's buffers hold: the write ends only once the
	// server reads the body, which it does only after it admitted the
	// request and counted its 45 MiB.
	if _, err := writer.Write([]byte(`{"from":"a@a.test",` + strings.Repeat(" ", 4*mib))); err != nil {
		t.Fatal(err)
	}

	post := func(key string, size int64) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", s.URL+"/v1/emails/send", io.LimitReader(neverEnding{}, size))
		req.ContentLength = size
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Expect", "100-continue") // a refusal costs no upload
		client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct{ Code string }
		json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Code
	}
	// A's next 10 MiB would take it past its share.
	if status, code := post(keyA, 10*mib); status != 429 || code != "rate_limited" {
		t.Fatalf("account A's second body: %d %s, want 429 rate_limited", status, code)
	}
	// B sends as much meanwhile (not JSON: its body is read and refused).
	if status, code := post(keyB, 10*mib); status != 400 || code != "invalid_json" {
		t.Errorf("account B's body while A is at its share: %d %s, want it read (400 invalid_json)", status, code)
	}
	if r := s.Do("POST", "/api/auth/api-keys", adminB, map[string]any{"name": "during A's uploads"}); r.Status != 201 {
		t.Errorf("account B's small request: %d %s", r.Status, r.Body)
	}
	writer.CloseWithError(io.ErrUnexpectedEOF)
	<-slowDone
}

// neverEnding reads as an endless run of spaces.
type neverEnding struct{}

func (neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
