package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/webhook"
)

// The master key is replaced without losing anything: with the old key as
// previous, everything sealed under it still opens; rewrap moves the data
// keys under the new one, after which the old key can go; suppressions
// hold throughout. A process given only the new key before the rewrap
// refuses to start rather than fail on every email.
func TestMasterKeyRotation(t *testing.T) {
	db := pgtest.NewURL(t)
	oldKey, newKey := strings.Repeat("1a", 32), strings.Repeat("2b", 32)
	base := apptest.Config(t, db)
	base.EgressAllowCIDRs, base.WebhookAllowHTTP = "127.0.0.0/8", true
	withKeys := func(current, previous string) config.Config {
		cfg := base
		cfg.MasterKey, cfg.MasterKeyPrevious = current, previous
		return cfg
	}
	type post struct {
		signature string
		body      []byte
	}
	received := make(chan post, 10)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		received <- post{r.Header.Get(webhook.HeaderSignature), b}
	}))
	defer rcv.Close()

	s := apptest.StartWith(t, withKeys(oldKey, ""))
	account, _, key := s.Sender("acme.test")
	waitStatus := func(s *apptest.Server, id, want string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); s.Do("GET", "/v1/emails/"+id, key, nil).JSON(t)["status"] != want; {
			if time.Now().After(deadline) {
				t.Fatalf("email %s is not %s", id, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	send := func(s *apptest.Server, to string) string {
		t.Helper()
		r := s.Do("POST", "/v1/emails/send", key, map[string]any{"from": "billing@acme.test", "to": to, "subject": "statement", "text": "hi"})
		if r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	first := send(s, "ann@example.org")
	waitStatus(s, first, "delivered")
	waitStatus(s, send(s, "bounce@simulator.amazonses.com"), "bounced") // suppressed from now on
	r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": rcv.URL})
	if r.Status != 201 {
		t.Fatalf("endpoint: %d %s", r.Status, r.Body)
	}
	endpoint, secret := r.JSON(t)["id"].(string), r.JSON(t)["secret"].(string)
	s.Stop()

	_, err := app.Open(context.Background(), withKeys(newKey, ""), slog.New(slog.DiscardHandler))
	if !errors.Is(err, datakeys.ErrWrongMasterKey) {
		t.Fatalf("start with the new key alone before the rewrap: %v", err)
	}

	s = apptest.StartWith(t, withKeys(newKey, oldKey))
	if e := s.Do("GET", "/v1/emails/"+first, key, nil).JSON(t); e["to_email"] != "ann@example.org" {
		t.Fatalf("the first email under the new key with the old as previous: %v", e)
	}
	waitStatus(s, send(s, "bounce@simulator.amazonses.com"), "failed") // still suppressed
	if r := s.Do("POST", "/v1/webhooks/"+endpoint+"/test", key, nil); r.Status != 202 && r.Status != 200 {
		t.Fatalf("test event: %d %s", r.Status, r.Body)
	}
	select {
	case p := <-received:
		if err := webhook.Verify(secret, p.signature, p.body, webhook.DefaultTolerance); err != nil {
			t.Fatalf("signature: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery with the secret sealed under the old key")
	}

	out, _, err := run(t, "master-key", "rewrap", "--json", "--database-url", db, "--data-dir", base.DataDir,
		"--blob-dir", base.BlobDir, "--master-key", newKey, "--master-key-previous", oldKey)
	var got struct {
		Rewrapped, Current int
		Previous           app.Sealed `json:"under_previous_key"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Rewrapped < 3 {
		t.Fatalf("rewrap: %q %v", out, err)
	}
	// What only the API re-seals is named, so it is rotated before the
	// old key goes.
	if len(got.Previous.WebhookEndpoints) != 1 || got.Previous.WebhookEndpoints[0].ID != endpoint || got.Previous.WebhookEndpoints[0].AccountID != account ||
		len(got.Previous.Domains) != 1 || got.Previous.Domains[0].Name != "acme.test" || got.Previous.Domains[0].AccountID != account {
		t.Fatalf("rewrap names as under the previous key: %+v", got.Previous)
	}
	again, _, err := run(t, "master-key", "rewrap", "--json", "--database-url", db, "--data-dir", base.DataDir,
		"--blob-dir", base.BlobDir, "--master-key", newKey, "--master-key-previous", oldKey)
	if err != nil || !strings.Contains(again, `"rewrapped":0`) {
		t.Fatalf("rewrap again: %q %v", again, err)
	}
	s.Stop()

	s = apptest.StartWith(t, withKeys(newKey, ""))
	if e := s.Do("GET", "/v1/emails/"+first, key, nil).JSON(t); e["to_email"] != "ann@example.org" {
		t.Fatalf("the first email under the new key alone: %v", e)
	}
	if _, none, err := s.SecretsByKey(context.Background()); err != nil || len(none.WebhookEndpoints) != 1 || none.WebhookEndpoints[0].ID != endpoint {
		t.Fatalf("secrets no key given opens: %+v %v", none, err)
	}
	waitStatus(s, send(s, "bounce@simulator.amazonses.com"), "failed")
}
