package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/webhook"
)

func TestReceiver(t *testing.T) {
	const secret = "whsec_dev"
	var out bytes.Buffer
	srv := httptest.NewServer(newReceiver(&out).handler(secret))
	defer srv.Close()

	post := func(deliveryID, body, key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(body))
		req.Header.Set(webhook.HeaderSignature, webhook.Sign(key, []byte(body), time.Now()))
		req.Header.Set(webhook.HeaderDeliveryID, deliveryID)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	delivered := `{"type":"email.delivered","created_at":"2026-03-01T12:00:05.000Z","data":{"email_id":"em_1","to":"ann@example.org","subject":"Hi","tags":{}}}`
	sent := `{"type":"email.sent","created_at":"2026-03-01T12:00:00.000Z","data":{"email_id":"em_1","to":"ann@example.org","subject":"Hi","tags":{}}}`

	for _, c := range []struct {
		id, body, key string
		want          int
	}{
		{"dlv_2", delivered, secret, 204},
		{"dlv_2", delivered, secret, 204}, // a retry
		{"dlv_1", sent, secret, 204},      // arrives late
		{"dlv_3", sent, "whsec_other", 401},
	} {
		if got := post(c.id, c.body, c.key); got != c.want {
			t.Errorf("delivery %s: status %d, want %d", c.id, got, c.want)
		}
	}

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s\nwant 3 lines", out.String())
	}
	if !strings.Contains(lines[0], "email.delivered") || !strings.Contains(lines[0], "delivery=dlv_2") {
		t.Errorf("line 1: %s", lines[0])
	}
	if !strings.HasPrefix(lines[1], "duplicate delivery dlv_2") {
		t.Errorf("line 2: %s", lines[1])
	}
	if !strings.Contains(lines[2], "email.sent") || !strings.Contains(lines[2], "older than an event already seen") {
		t.Errorf("line 3: %s", lines[2])
	}
}
