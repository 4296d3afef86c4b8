package app_test

import (
	"fmt"
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
}
