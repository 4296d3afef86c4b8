package readapi_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// A rebuild moves its new tables in with one transaction that holds the live
// ones. An email read that waits for that transaction must find the email in
// the tables moved in, every row of which that transaction wrote: the read's
// snapshot is taken once it holds the tables, not before it waits.
func TestAnEmailReadWaitingForASwapSeesTheNewTables(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := memory.New()
	defer store.Close()
	if err := projections.NewRunner(pool, store, nil, slog.New(slog.DiscardHandler), projections.Emails{}).Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO emails (id, account_id, from_email, to_email, to_addresses, subject,
			status, top_status, top_rank, top_at, created_at)
		VALUES ('e1', 'acct', 'a@acme.test', 'b@example.org', '{b@example.org}', 's', 'queued', 'queued', 0, now(), now())`); err != nil {
		t.Fatal(err)
	}
	reader := readapi.New(pool, time.Now)
	if _, err := reader.Email(ctx, "acct", "e1"); err != nil {
		t.Fatalf("before the swap: %v", err)
	}

	swap, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer swap.Rollback(ctx)
	for _, stmt := range []string{
		"LOCK TABLE emails, email_events IN ACCESS EXCLUSIVE MODE",
		"CREATE TABLE emails_new (LIKE emails INCLUDING ALL)",
		"INSERT INTO emails_new SELECT * FROM emails",
		"CREATE TABLE email_events_new (LIKE email_events INCLUDING ALL)",
		"INSERT INTO email_events_new SELECT * FROM email_events",
	} {
		if _, err := swap.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	read := make(chan error, 1)
	go func() {
		_, err := reader.Email(ctx, "acct", "e1")
		read <- err
	}()
	// The read waits for the swap's lock.
	for waiting := false; !waiting; {
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname IN ('emails', 'email_events'))`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, stmt := range []string{
		"DROP TABLE emails", "ALTER TABLE emails_new RENAME TO emails",
		"DROP TABLE email_events", "ALTER TABLE email_events_new RENAME TO email_events",
	} {
		if _, err := swap.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := swap.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatalf("a read that waited for the swap: %v", err)
	}
}
