package readapi_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// Daily stats list every date of the range, also on a connection whose
// zone has no midnight on one of them (Chile moves its clocks at midnight
// on 6 September 2026).
func TestDailyStatsListEveryDateInAnyZone(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewURL(t)
	migrated, err := database.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer migrated.Close()
	if err := database.Migrate(ctx, migrated); err != nil {
		t.Fatal(err)
	}
	store := memory.New()
	defer store.Close()
	runner := projections.NewRunner(migrated, store, projections.NewWaiter(migrated, time.Second), slog.New(slog.DiscardHandler),
		projections.All(datakeys.AddressKeys{})...)
	if err := runner.Prepare(ctx); err != nil { // creates the read models
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = "America/Santiago"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	from, to := time.Date(2026, 9, 5, 0, 0, 0, 0, time.UTC), time.Date(2026, 9, 8, 0, 0, 0, 0, time.UTC)
	stats, err := readapi.New(pool, time.Now).DailyStats(ctx, "acct-1", from, to)
	if err != nil {
		t.Fatal(err)
	}
	var dates []string
	for _, s := range stats {
		dates = append(dates, s.Date)
	}
	if want := []string{"2026-09-05", "2026-09-06", "2026-09-07", "2026-09-08"}; !slices.Equal(dates, want) {
		t.Fatalf("dates %v, want %v", dates, want)
	}
}
