package readapi

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// An account's email lists take turns: while one of its lists runs, its
// next waits, and another account's is answered meanwhile.
func TestAnAccountsListsTakeTurns(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := memory.New()
	defer store.Close()
	if err := projections.NewRunner(pool, store, nil, slog.New(slog.DiscardHandler), projections.Emails{}).Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	r := New(pool, time.Now)
	first := EmailFilter{Page: 1, PerPage: 20}

	release, err := r.lists.Take(ctx, "busy") // one of its lists under way
	if err != nil {
		t.Fatal(err)
	}
	waiting, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := r.ListEmails(waiting, "busy", first); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the account's next list did not wait for its turn: %v", err)
	}
	if page, err := r.ListEmails(ctx, "other", first); err != nil || page.Emails == nil {
		t.Fatalf("another account's list: %+v, %v", page, err)
	}
	release()
	if _, err := r.ListEmails(ctx, "busy", first); err != nil {
		t.Fatalf("the account's list after its turn: %v", err)
	}
}
