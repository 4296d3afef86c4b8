package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// noWorkers runs the API and the projections only: emails stay queued,
// which is all these tests read.
func noWorkers(c *config.Config) { c.Roles = []string{"api", "projections"} }

// appendQueued appends an EmailQueued straight to the event store, as no
// API request could: the write side refuses what the read side cannot store,
// and the read side must survive it anyway.
func appendQueued(t *testing.T, store eventstore.Store, accountID, subject string) string {
	t.Helper()
	id := uuid.NewString()
	data, err := codec.EncodeAll([]domain.Event{&email.Queued{EmailID: id, AccountID: accountID, From: "a@acme.test",
		FromEmail: "a@acme.test", To: []string{"x@example.org"}, Subject: subject, QueuedAt: time.Now()}}, eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(context.Background(), email.Stream(id), eventstore.NoStream, data...); err != nil {
		t.Fatal(err)
	}
	return id
}

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// eventually polls check until it holds, or fails with what it last said.
func eventually(t *testing.T, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, last := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; last: %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An event whose subject holds a NUL cannot be stored; the emails projector
// quarantines its stream and every other email stays readable. /readyz
// stays ready and names the stream; /metrics counts it.
func TestPoisonEventDoesNotStopTheEmailsProjector(t *testing.T) {
	s := apptest.Start(t, noWorkers)
	acct, _, key := s.Sender("acme.test")
	_, _, otherKey := s.Sender("other.test")
	poison := appendQueued(t, s.Store, acct, "a\x00b")

	sent := map[string]string{}
	for k, from := range map[string]string{key: "a@acme.test", otherKey: "b@other.test"} {
		r := s.Do("POST", "/v1/emails/send", k, map[string]any{"from": from, "to": "x@example.org", "subject": "after the poison", "text": "t"})
		if r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		sent[k] = r.JSON(t)["id"].(string)
	}
	for k, id := range sent {
		if r := s.Do("GET", "/v1/emails/"+id, k, nil); r.Status != 200 {
			t.Fatalf("email sent after the poison: %d %s", r.Status, r.Body)
		}
		list := s.Do("GET", "/v1/emails", k, nil).JSON(t)
		if data := list["data"].([]any); len(data) != 1 || data[0].(map[string]any)["id"] != id {
			t.Fatalf("list: %v", list)
		}
	}
	if r := s.Do("GET", "/v1/emails/"+poison, key, nil); r.Status != 404 {
		t.Fatalf("poisoned email: %d %s", r.Status, r.Body)
	}

	eventually(t, "/readyz names the quarantined stream", func() (bool, string) {
		r := s.Do("GET", "/readyz", "", nil)
		var body struct {
			Status      string
			Quarantined []struct{ Projection, Stream string }
		}
		json.Unmarshal(r.Body, &body)
		ok := r.Status == 200 && body.Status == "ready" && len(body.Quarantined) == 1 &&
			body.Quarantined[0].Projection == "emails" && body.Quarantined[0].Stream == email.Stream(poison)
		return ok, string(r.Body)
	})
	st, err := s.Runner.Status(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st {
		if p.Name == "emails" && (len(p.Quarantined) != 1 || !strings.Contains(p.Quarantined[0].Error, "0x00") || p.Quarantined[0].EventType != "EmailQueued") {
			t.Fatalf("emails status: %+v", p)
		}
		// Other projectors apply the stream: quarantine is per projector.
		if p.Name != "emails" && len(p.Quarantined) != 0 {
			t.Fatalf("%s quarantined %+v", p.Name, p.Quarantined)
		}
	}
	m := string(s.Do("GET", "/metrics", "", nil).Body)
	for _, want := range []string{`mailroom_projection_quarantined_streams{projection="emails"} 1`,
		`mailroom_projection_quarantined_streams{projection="webhooks"} 0`, `mailroom_projection_failing{projection="emails"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A projector that fails for every event (its table was dropped) makes the
// instance unready, naming it; a rebuild repairs it.
func TestFailingProjectionMakesTheInstanceUnready(t *testing.T) {
	s := apptest.Start(t, noWorkers)
	acct, _, key := s.Sender("acme.test")
	if r := s.Do("GET", "/readyz", "", nil); r.Status != 200 {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}
	if _, err := s.Pool.Exec(context.Background(), "DROP TABLE email_events, emails"); err != nil {
		t.Fatal(err)
	}
	id := appendQueued(t, s.Store, acct, "hello")
	eventually(t, "/readyz 503 naming the failing projection", func() (bool, string) {
		r := s.Do("GET", "/readyz", "", nil)
		return r.Status == 503 && strings.Contains(string(r.Body), "projection emails is failing") &&
			strings.Contains(string(r.Body), "does not exist"), string(r.Body)
	})
	if m := string(s.Do("GET", "/metrics", "", nil).Body); !strings.Contains(m, `mailroom_projection_failing{projection="emails"} 1`) {
		t.Errorf("metrics do not show the failing projection")
	}
	// Nothing was quarantined: the failure is not the event's.
	st, _ := s.Runner.Status(context.Background(), 0)
	for _, p := range st {
		if len(p.Quarantined) != 0 {
			t.Fatalf("%s quarantined %+v", p.Name, p.Quarantined)
		}
	}

	if err := s.Runner.Rebuild(context.Background(), projections.Emails{}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/readyz 200 after the rebuild", func() (bool, string) {
		r := s.Do("GET", "/readyz", "", nil)
		return r.Status == 200, string(r.Body)
	})
	if r := s.Do("GET", "/v1/emails/"+id, key, nil); r.Status != 200 {
		t.Fatalf("email after the rebuild: %d %s", r.Status, r.Body)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// With MAILROOM_OPS_ADDR, /metrics and the detail of /readyz are served on
// the operator listener only; the public one says ready or not ready.
func TestOperatorListener(t *testing.T) {
	cfg := apptest.Config(t, pgtest.NewURL(t))
	noWorkers(&cfg)
	cfg.HTTPAddr, cfg.OpsAddr = freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	ls, err := app.Listen(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.OpenOn(ctx, cfg, log, ls)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ls) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	public, ops := "http://"+cfg.HTTPAddr, "http://"+cfg.OpsAddr
	for _, base := range []string{public, ops} {
		eventually(t, base+" up", func() (bool, string) {
			resp, err := http.Get(base + "/healthz")
			if err != nil {
				return false, err.Error()
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200 && strings.Contains(string(body), `"ok"`), string(body)
		})
	}

	poison := appendQueued(t, a.Store, uuid.NewString(), "a\x00b")
	eventually(t, "operator /readyz names the quarantined stream", func() (bool, string) {
		code, body := get(t, ops+"/readyz")
		return code == 200 && strings.Contains(body, email.Stream(poison)), body
	})
	if code, body := get(t, public+"/readyz"); code != 200 || strings.TrimSpace(body) != `{"status":"ready"}` {
		t.Fatalf("public /readyz: %d %s", code, body)
	}
	if code, _ := get(t, public+"/metrics"); code != 404 {
		t.Fatalf("public /metrics: %d", code)
	}
	if code, body := get(t, ops+"/metrics"); code != 200 || !strings.Contains(body, `mailroom_projection_quarantined_streams{projection="emails"} 1`) ||
		!strings.Contains(body, "\nmailroom_starting 0\n") {
		t.Fatalf("operator /metrics: %d", code)
	}
	// The API is on the public listener only.
	if code, _ := get(t, public+"/v1/emails"); code != 401 {
		t.Fatalf("public /v1/emails without a key: %d", code)
	}
	if code, _ := get(t, ops+"/v1/emails"); code != 404 {
		t.Fatalf("operator /v1/emails: %d", code)
	}

	// Unready: the operator listener says why, the public one only that.
	if _, err := a.Pool.Exec(ctx, "DROP TABLE email_events, emails"); err != nil {
		t.Fatal(err)
	}
	appendQueued(t, a.Store, uuid.NewString(), "hello")
	eventually(t, "operator /readyz 503 naming the projection", func() (bool, string) {
		code, body := get(t, ops+"/readyz")
		return code == 503 && strings.Contains(body, "projection emails is failing"), body
	})
	if code, body := get(t, public+"/readyz"); code != 503 || strings.Contains(body, "emails") || !strings.Contains(body, "not_ready") {
		t.Fatalf("public /readyz when unready: %d %s", code, body)
	}
	if code, _ := get(t, public+"/healthz"); code != 200 {
		t.Fatalf("public /healthz: %d", code)
	}
}

// mailroom_emails_stuck counts the emails queued for more than 15 minutes,
// in every account, and none that is younger; a suspended account's emails
// wait by design and are not stuck.
func TestStuckEmailsAreCounted(t *testing.T) {
	s := apptest.Start(t, noWorkers)
	_, _, key := s.Sender("acme.test")
	_, _, otherKey := s.Sender("other.test")
	suspended, _, suspendedKey := s.Sender("suspended.test")
	s.Clock.Advance(-20 * time.Minute)
	for k, from := range map[string]string{key: "a@acme.test", otherKey: "b@other.test", suspendedKey: "c@suspended.test"} {
		if r := s.Do("POST", "/v1/emails/send", k, map[string]any{"from": from, "to": "x@example.org", "subject": "old", "text": "t"}); r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
	}
	if err := s.Commands.SuspendAccount(context.Background(), suspended, commands.Meta{Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	s.Clock.Advance(20 * time.Minute)
	if r := s.Do("POST", "/v1/emails/send", key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "new", "text": "t"}); r.Status != 202 {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	if m := string(s.Do("GET", "/metrics", "", nil).Body); !strings.Contains(m, "\nmailroom_emails_stuck 2\n") {
		t.Errorf("metrics: want mailroom_emails_stuck 2 in\n%s", m)
	}
}

// A transaction left open in another database of the same PostgreSQL
// server (another application's batch job, say) delays no read: a key
// works from its first request, a revocation is confirmed at once, and a
// sent email is found straight after its 202.
func TestATransactionInAnotherDatabaseDelaysNoRead(t *testing.T) {
	s := apptest.Start(t, noWorkers)
	stillOpen := pgtest.TransactionElsewhere(t)
	_, admin, sendKey := s.Sender("acme.test")
	r := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "reader", "permissions": []string{"emails:read"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("create key: %d %s", r.Status, r.Body)
	}
	key, keyID := r.JSON(t)["key"].(string), r.JSON(t)["id"].(string)
	if r := s.Do("GET", "/v1/emails", key, nil); r.Status != http.StatusOK {
		t.Fatalf("first request with the new key: %d %s", r.Status, r.Body)
	}
	r = s.Do("POST", "/v1/emails/send", sendKey, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "Hi", "text": "Hi"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	if r := s.Do("GET", "/v1/emails/"+r.JSON(t)["id"].(string), key, nil); r.Status != http.StatusOK {
		t.Fatalf("the email straight after its 202: %d %s", r.Status, r.Body)
	}
	if r := s.Do("DELETE", "/api/auth/api-keys/"+keyID, admin, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if r := s.Do("GET", "/v1/emails", key, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("the revoked key: %d %s", r.Status, r.Body)
	}
	if !stillOpen() {
		t.Fatal("the other database's transaction ended early")
	}
}
