package readapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// An endpoint's pending deliveries are listed from an index of their own,
// on every page and in the generic plan a prepared statement ends up with:
// a handful among the endpoint's thousands of delivered ones (and other
// endpoints' many more) is not found by reading the whole table.
func TestPendingDeliveriesAreListedFromTheirIndex(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, projections.Webhooks{}.Schema()); err != nil {
		t.Fatal(err)
	}
	// 20,000 deliveries to ep, three still pending among them, and 60,000
	// to other endpoints.
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, account_id, email_id, event_type, status, created_at)
		SELECT 'd' || g, CASE WHEN g <= 20000 THEN 'ep' ELSE 'other-' || g % 4 END, 'acct', 'e' || g, 'email.sent',
			CASE WHEN g IN (100, 9000, 19990) THEN 'pending' ELSE 'delivered' END,
			timestamptz '2026-01-01' + g * interval '1 minute'
		FROM generate_series(1, 80000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE webhook_deliveries`); err != nil {
		t.Fatal(err)
	}
	r := New(pool, time.Now)
	page, err := r.Deliveries(ctx, "acct", "ep", DeliveryFilter{Status: "pending", Limit: 2})
	if err != nil || len(page.Deliveries) != 2 || page.Deliveries[0].ID != "d19990" || page.Deliveries[1].ID != "d9000" || !page.HasMore {
		t.Fatalf("first page of pending deliveries: %+v %v", page, err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range []string{"auto", "force_generic_plan"} {
		for _, after := range []bool{false, true} {
			for _, q := range []string{`SET plan_cache_mode = ` + mode,
				`PREPARE list(text, text, int, text) AS ` + deliveriesQuery("pending", after)} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			var plan string
			if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE list('ep', 'acct', 26, 'd9000')`).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(plan, "webhook_deliveries_pending_idx") || strings.Contains(plan, "Seq Scan") {
				t.Fatalf("pending deliveries (plan_cache_mode %s, after a cursor: %v) are not listed from their index:\n%s", mode, after, plan)
			}
			if _, err := conn.Exec(ctx, `DEALLOCATE list; RESET plan_cache_mode`); err != nil {
				t.Fatal(err)
			}
		}
	}
}
