package processmanagers_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/projections"
)

// Worker instances tick on timers of their own, out of phase: between
// them they run one domain poll per interval, not one each, so every
// pending domain's DNS is not queried once per instance. A pass asked for
// now (Tick) runs whatever the time of the last.
func TestInstancesRunOneDomainPollPerIntervalBetweenThem(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, projections.Domains{}.Schema()); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a := &processmanagers.DomainPoller{Pool: pool, Now: clock, Interval: time.Minute, Log: slog.Default()}
	b := &processmanagers.DomainPoller{Pool: pool, Now: clock, Interval: time.Minute, Log: slog.Default()}
	tick := func(who string, p *processmanagers.DomainPoller, want bool) {
		t.Helper()
		ran, err := p.OnTimer(ctx)
		if err != nil || ran != want {
			t.Fatalf("%s's tick at %s: ran %v, err %v; want ran %v", who, now.Format(time.TimeOnly), ran, err, want)
		}
	}
	tick("A", a, true)
	now = now.Add(30 * time.Second)
	tick("B", b, false)
	now = now.Add(30*time.Second - 10*time.Millisecond) // A's timer, a little early
	tick("A", a, true)
	now = now.Add(30 * time.Second)
	tick("B", b, false)
	now = now.Add(40 * time.Second) // A stopped; B's timer carries on
	tick("B", b, true)
	if ran, err := a.Tick(ctx); err != nil || !ran {
		t.Fatalf("a pass asked for now: ran %v, err %v", ran, err)
	}
	now = now.Add(time.Second)
	tick("B", b, false)
}

// The same holds for retention passes.
func TestInstancesRunOneRetentionPassPerIntervalBetweenThem(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, ddl := range []string{projections.Accounts{}.Schema(), projections.Emails{}.Schema()} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a := &processmanagers.Retention{Pool: pool, DefaultDays: 45, Now: clock, Interval: time.Hour, Log: slog.Default()}
	b := &processmanagers.Retention{Pool: pool, DefaultDays: 45, Now: clock, Interval: time.Hour, Log: slog.Default()}
	for i, step := range []struct {
		r     *processmanagers.Retention
		after time.Duration
		ran   bool
	}{{a, 0, true}, {b, 20 * time.Minute, false}, {a, 40 * time.Minute, true}, {b, 20 * time.Minute, false}, {b, time.Hour, true}} {
		now = now.Add(step.after)
		if ran, _, err := step.r.OnTimer(ctx); err != nil || ran != step.ran {
			t.Fatalf("tick %d: ran %v, err %v; want ran %v", i+1, ran, err, step.ran)
		}
	}
}
