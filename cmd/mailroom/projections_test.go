package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// An email the emails read model refuses (an operator's constraint) is
// quarantined: later emails of the same and another account stay readable,
// /readyz and `projections status` name it, and once the constraint is gone
// `projections retry` brings the email, with everything that happened to it
// meanwhile, into the read model.
func TestQuarantineAndRetry(t *testing.T) {
	db := pgtest.NewURL(t)
	s := apptest.StartWith(t, apptest.Config(t, db))
	// The server's data directory holds the master key the commands need
	// to open the emails' data keys.
	flags := []string{"--database-url", db, "--data-dir", s.Config.DataDir}
	_, _, key := s.Sender("acme.test")
	_, _, otherKey := s.Sender("other.test")
	ctx := context.Background()
	if _, err := s.Pool.Exec(ctx, "ALTER TABLE emails ADD CONSTRAINT operator_check CHECK (subject <> 'refused subject')"); err != nil {
		t.Fatal(err)
	}
	send := func(key, from, subject string) string {
		t.Helper()
		r := s.Do("POST", "/v1/emails/send", key, map[string]any{"from": from, "to": "x@example.org", "subject": subject, "text": "t"})
		if r.Status != 202 {
			t.Fatalf("send %q: %d %s", subject, r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	refused := send(key, "a@acme.test", "refused subject")
	same := send(key, "a@acme.test", "same account")
	other := send(otherKey, "b@other.test", "other account")
	delivered := func(key, id string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			r := s.Do("GET", "/v1/emails/"+id, key, nil)
			if r.Status == 200 && r.JSON(t)["status"] == "delivered" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("email %s never delivered: %d %s", id, r.Status, r.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	delivered(key, same)
	delivered(otherKey, other)
	if list := s.Do("GET", "/v1/emails", key, nil).JSON(t); list["pagination"].(map[string]any)["total"] != float64(1) {
		t.Fatalf("list: %v", list)
	}
	if r := s.Do("GET", "/v1/emails/"+refused, key, nil); r.Status != 404 {
		t.Fatalf("refused email: %d %s", r.Status, r.Body)
	}
	if r := s.Do("GET", "/readyz", "", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"stream":"email-`+refused+`"`) {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}

	status := func() map[string]projections.Status {
		t.Helper()
		out, _, err := run(t, append([]string{"projections", "status", "--json"}, flags...)...)
		var st struct{ Projections []projections.Status }
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("projections status --json: %q %v", out, err)
		}
		by := map[string]projections.Status{}
		for _, p := range st.Projections {
			by[p.Name] = p
		}
		return by
	}
	q := status()["emails"].Quarantined
	if len(q) != 1 || q[0].Stream != "email-"+refused || q[0].EventType != "EmailQueued" || !strings.Contains(q[0].Error, "operator_check") || q[0].Since.IsZero() {
		t.Fatalf("quarantined: %+v", q)
	}
	out, _, err := run(t, append([]string{"projections", "status"}, flags...)...)
	if err != nil || !strings.Contains(out, "1 quarantined") || !strings.Contains(out, "email-"+refused) || !strings.Contains(out, "operator_check") {
		t.Fatalf("projections status: %v\n%s", err, out)
	}

	// Retrying before the cause is removed changes nothing and says so.
	out, _, err = run(t, append([]string{"projections", "retry", "emails"}, flags...)...)
	if err == nil || !strings.Contains(out, "still failing") || !strings.Contains(out, "email-"+refused) {
		t.Fatalf("retry with the constraint in place: %v\n%s", err, out)
	}
	if q := status()["emails"].Quarantined; len(q) != 1 || q[0].Attempts != 2 {
		t.Fatalf("after a failed retry: %+v", q)
	}

	if _, err := s.Pool.Exec(ctx, "ALTER TABLE emails DROP CONSTRAINT operator_check"); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, append([]string{"projections", "retry", "emails", "--json"}, flags...)...)
	var res struct{ Results []projections.RetryResult }
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Results) != 1 ||
		res.Results[0].Stream != "email-"+refused || res.Results[0].Error != "" || res.Results[0].Applied == 0 {
		t.Fatalf("retry: %v\n%s", err, out)
	}
	// The email shows what happened to it while quarantined: it was sent.
	delivered(key, refused)
	for name, p := range status() {
		if len(p.Quarantined) != 0 || p.Failing != nil {
			t.Fatalf("%s after retry: %+v", name, p)
		}
	}
	if out, _, err := run(t, append([]string{"projections", "retry", "--all"}, flags...)...); err != nil || strings.TrimSpace(out) != "nothing quarantined" {
		t.Fatalf("retry --all with nothing quarantined: %v %q", err, out)
	}
}
