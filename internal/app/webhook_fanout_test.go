package app_test

import (
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// An account without endpoints gets no fan-out job for its emails'
// events, nor one with an endpoint for a type other than the event's;
// the endpoint still hears of its own type.
func TestNoFanoutNoEndpointCanHear(t *testing.T) {
	// The webhook reader judges an email's events by its account's
	// endpoints only once it has read the email's EmailQueued in an
	// earlier batch; an email sent in the same batch gets its fan-outs,
	// which find no endpoint. A provider taking a second keeps the two
	// apart however loaded the machine.
	w := newHookWorld(t, func(c *config.Config) { c.SandboxLatency = time.Second })
	_, _, otherKey := w.Sender("other.test")
	rcv := newReceiver(t, always(204))
	r := w.Do("POST", "/v1/webhooks", otherKey, map[string]any{"url": rcv.URL, "event_types": []string{"email.delivered"}})
	if r.Status != 201 {
		t.Fatalf("endpoint: %d %s", r.Status, r.Body)
	}
	var quiet, heard []string
	for range 5 {
		quiet = append(quiet, w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "s", "text": "t"})["id"].(string))
	}
	for range 3 {
		r := w.Do("POST", "/v1/emails/send", otherKey, map[string]any{"from": "a@other.test", "to": "bob@example.org", "subject": "s", "text": "t"})
		if r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		heard = append(heard, r.JSON(t)["id"].(string))
	}
	rcv.waitFor(t, len(heard))

	// Once the webhook reader has planned every email's delivery:
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range append(quiet, heard...) {
		for {
			evs, err := w.Store.ReadStream(t.Context(), email.Stream(id), 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			var c, p int64
			if err := w.Pool.QueryRow(t.Context(), `SELECT commit_position, prepare_position FROM processmanager_checkpoints WHERE name = 'webhooks'`).Scan(&c, &p); err != nil {
				t.Fatal(err)
			}
			last := evs[len(evs)-1]
			if last.Type == (&email.Delivered{}).EventType() && !(eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}).Less(last.Position) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("email %s: last event %s not planned", id, last.Type)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	rows, err := w.Pool.Query(t.Context(), `SELECT args->>'email_id', args->>'type' FROM river_job WHERE kind = 'webhook_fanout'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			t.Fatal(err)
		}
		got[id+" "+typ] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range quiet {
		if got[id+" email.sent"] || got[id+" email.delivered"] {
			t.Errorf("email %s of an account without endpoints has fan-out jobs", id)
		}
	}
	for _, id := range heard {
		if got[id+" email.sent"] {
			t.Errorf("email %s has a fan-out job for email.sent, which no endpoint hears", id)
		}
		if !got[id+" email.delivered"] {
			t.Errorf("email %s has no fan-out job for email.delivered", id)
		}
	}
}

// An event with one endpoint to hear it is posted by its fan-out, without
// an attempt job of its own; with two endpoints, each delivery gets its
// job. Every delivery arrives once either way.
func TestFanoutPostsALoneDeliveryItself(t *testing.T) {
	w := newHookWorld(t)
	first := newReceiver(t, always(204))
	w.endpoint(t, map[string]any{"url": first.URL, "event_types": []string{"email.delivered"}})
	attemptJobs := func() (n int) {
		t.Helper()
		if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'webhook_attempt'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "s", "text": "t"})
	first.waitFor(t, 1)
	if n := attemptJobs(); n != 0 {
		t.Fatalf("a lone delivery made %d attempt jobs, want none", n)
	}

	second := newReceiver(t, always(204))
	w.endpoint(t, map[string]any{"url": second.URL, "event_types": []string{"email.delivered"}})
	w.send(t, map[string]any{"from": "a@acme.test", "to": "bob@example.org", "subject": "s", "text": "t"})
	first.waitFor(t, 2)
	second.waitFor(t, 1)
	if n := attemptJobs(); n != 2 {
		t.Fatalf("two deliveries of one event made %d attempt jobs, want 2", n)
	}
	time.Sleep(300 * time.Millisecond) // a second post of either would have come by now
	if a, b := len(first.requests()), len(second.requests()); a != 2 || b != 1 {
		t.Fatalf("the endpoints got %d and %d requests, want 2 and 1", a, b)
	}
}
