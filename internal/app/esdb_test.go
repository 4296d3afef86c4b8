package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/eventstore/esdb/esdbfake"
)

// TestOnEventStoreDB runs Mailroom with its events in EventStoreDB (the
// protocol-level fake of its gRPC API) and the read models in PostgreSQL:
// keys, a send through the pipeline, the timeline.
func TestOnEventStoreDB(t *testing.T) {
	fake, err := esdbfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	w := newSendWorld(t, func(c *config.Config) { c.EventStore = fake.ConnectionString() })

	r := w.Do("POST", "/api/auth/api-keys", w.admin, map[string]any{"name": "reader", "permissions": []string{"emails:read"}})
	if r.Status != 201 {
		t.Fatalf("create key: %d %s", r.Status, r.Body)
	}
	reader := r.JSON(t)["key"].(string)
	if got := w.Do("GET", "/v1/emails", reader, nil); got.Status != 200 {
		t.Fatalf("list with the new key: %d %s", got.Status, got.Body)
	}
	id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "on esdb", "text": "t"})["id"].(string)
	e := w.waitFor(t, id, status("delivered"))
	if got := timelineOf(e); fmt.Sprint(got) != "[sent delivered]" {
		t.Fatalf("timeline %v", got)
	}
	if fake.Events() == 0 {
		t.Fatal("no event reached EventStoreDB")
	}
	var n int
	w.Pool.QueryRow(t.Context(), "SELECT count(*) FROM events").Scan(&n)
	if n != 0 {
		t.Fatalf("%d events went to PostgreSQL instead", n)
	}
	// The largest email the API takes fits in one append of the strictest
	// EventStoreDB (the fake keeps its 1 MiB limit): 50 recipients and 50
	// reply-to addresses whose display names are at their longest.
	name := strings.Repeat("🎉", 998)
	var to, replyTo []string
	for i := range 50 {
		to = append(to, fmt.Sprintf(`"%s" <r%d@example.org>`, name, i))
		replyTo = append(replyTo, fmt.Sprintf(`"%s" <reply%d@acme.test>`, name, i))
	}
	big := w.send(t, map[string]any{"from": `"` + name + `" <a@acme.test>`, "to": to, "reply_to": replyTo,
		"subject": strings.Repeat("🎉", 998), "text": "t"})["id"].(string)
	w.waitFor(t, big, status("delivered"))

	// Every field at its limit, of characters JSON escapes (< & >), makes a
	// record past that append: 413, not a 500 that a retry would meet again.
	esc := strings.Repeat("<", 998)
	var attachments []map[string]any
	for i := range 20 {
		attachments = append(attachments, map[string]any{"filename": fmt.Sprintf("%d", i) + strings.Repeat("<", 250),
			"path": "https://127.0.0.1/" + strings.Repeat("&", 2000), "content_id": fmt.Sprintf("%d", i) + strings.Repeat("&", 250)})
	}
	to, replyTo = nil, nil
	for i := range 50 {
		to = append(to, fmt.Sprintf(`"%s" <r%d@example.org>`, esc, i))
		replyTo = append(replyTo, fmt.Sprintf(`"%s" <reply%d@acme.test>`, esc, i))
	}
	r = w.Do("POST", "/v1/emails/send", w.key, map[string]any{"from": `"` + esc + `" <a@acme.test>`, "to": to, "reply_to": replyTo,
		"subject": esc, "text": "t", "attachments": attachments})
	wantProblem(t, r, 413, "payload_too_large")

	// EventStoreDB counts the lag by reading, up to a bound: readiness
	// and metrics have it as on PostgreSQL.
	if r := w.Do("GET", "/readyz", "", nil); r.Status != 200 {
		t.Fatalf("/readyz on EventStoreDB: %d %s", r.Status, r.Body)
	}
	m := string(w.Do("GET", "/metrics", "", nil).Body)
	if !strings.Contains(m, `mailroom_projection_failing{projection="emails"} 0`) || !strings.Contains(m, `mailroom_projection_lag_events{projection="emails"} 0`) {
		t.Errorf("metrics lack the projections' state on EventStoreDB:\n%s", m)
	}
}
