package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// A resumed endpoint's pending deliveries are listed oldest event first,
// page after page, whatever their ids and the order they were recorded in.
func TestPendingDeliveriesAreListedOldestFirst(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, projections.Accounts{}.Schema()); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(pool)
	put, last := appender(t, store)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ep := uuid.NewString()
	put(webhook.Stream(ep), &webhook.Created{EndpointID: ep, AccountID: "acct", URL: "https://x.test", EventTypes: []string{"email.sent"},
		SealedSecret: "s", CreatedAt: t0})
	// Recorded out of order, two at the same instant.
	offsets := []int{5, 1, 7, 3, 3, 0, 6, 2, 4}
	for _, s := range offsets {
		d := &delivery.Created{DeliveryID: uuid.NewString(), EndpointID: ep, AccountID: "acct", EmailID: uuid.NewString(), Type: "email.sent",
			Payload: `{}`, CreatedAt: t0.Add(time.Duration(s) * time.Second)}
		put(delivery.Stream(d.DeliveryID), d)
	}
	r := projections.NewRunner(pool, store, nil, quiet, projections.Webhooks{})
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, projections.Webhooks{}, *last)

	var got []readapi.PendingDelivery
	for after := (readapi.PendingDelivery{}); ; {
		page, err := readapi.PendingOf(ctx, pool, ep, "", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got, after = append(got, page...), page[len(page)-1]
	}
	if len(got) != len(offsets) {
		t.Fatalf("listed %d deliveries, want %d", len(got), len(offsets))
	}
	seen := map[string]bool{}
	for i, d := range got {
		if seen[d.ID] {
			t.Fatalf("delivery %s listed twice", d.ID)
		}
		seen[d.ID] = true
		if i > 0 && (d.CreatedAt.Before(got[i-1].CreatedAt) || d.CreatedAt.Equal(got[i-1].CreatedAt) && d.ID < got[i-1].ID) {
			t.Errorf("delivery %d (%s, %s) listed after (%s, %s)", i, d.CreatedAt, d.ID, got[i-1].CreatedAt, got[i-1].ID)
		}
	}
}
