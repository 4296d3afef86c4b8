package processmanagers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/secretbox"
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

// refusingDelete is a blob store that refuses to delete one blob, as an
// object store does with an object under a legal hold.
type refusingDelete struct {
	blob.Store
	refuse map[blob.Digest]bool
}

func (s *refusingDelete) Delete(ctx context.Context, d blob.Digest) error {
	if s.refuse[d] {
		return errors.New("access denied: object is under legal hold")
	}
	return s.Store.Delete(ctx, d)
}

// An email past retention that cannot be erased is logged and tried again
// by the next pass, but does not stop the pass: the oldest emails failing
// every time, a whole batch of them (500) and more, must not keep every
// other account's emails for ever.
func TestAnEmailThatCannotBeErasedDoesNotHoldUpRetention(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, ddl := range []string{projections.Accounts{}.Schema(), projections.Emails{}.Schema()} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := blob.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	blobs := &refusingDelete{Store: fs, refuse: map[blob.Digest]bool{}}
	const emails, failing = 505, 501
	keys := datakeys.New(pool, box)
	content := datakeys.NewBlobs(blobs, keys)
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	now := queuedAt.Add(46 * 24 * time.Hour)
	clock := func() time.Time { return now }
	var ids []string
	for i := range emails {
		id := uuid.NewString()
		d, err := content.Put(ctx, id, "acct-1", []byte(fmt.Sprintf("<p>email %d</p>", i)))
		if err != nil {
			t.Fatal(err)
		}
		if i < failing {
			blobs.refuse[d[0]] = true // the oldest
		}
		q := &email.Queued{EmailID: id, AccountID: "acct-1", DomainID: "dom-1", From: "news@example.com",
			FromEmail: "news@example.com", To: []string{"ann@example.org"}, Subject: "Hi", HTMLDigest: string(d[0]), QueuedAt: queuedAt}
		data, err := codec.Encode(q, eventstore.Metadata{Actor: "apikey:k_test"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, email.Stream(id), eventstore.NoStream, data); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO emails (id, account_id, from_email, to_email, to_addresses, subject, status, top_status, top_rank, top_at, created_at)
			VALUES ($1, 'acct-1', 'news@example.com', 'ann@example.org', '{ann@example.org}', 'Hi', 'sent', 'sent', 1, $2, $2)`,
			id, queuedAt.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var logs bytes.Buffer
	r := &processmanagers.Retention{Pool: pool, DefaultDays: 45, Now: clock, Interval: time.Hour,
		Commands: commands.New(commands.Deps{Store: store, Now: clock, Box: box, Content: content, DataKeys: keys}),
		Log:      slog.New(slog.NewJSONHandler(&logs, nil))}
	ran, erased, err := r.Tick(ctx)
	if !ran || erased != emails-failing {
		t.Fatalf("retention pass: ran %v, erased %d, err %v; want the %d others erased", ran, erased, err, emails-failing)
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d email(s)", failing)) {
		t.Errorf("the pass reported %v, want the email it could not erase counted", err)
	}
	if !strings.Contains(logs.String(), ids[0]) || !strings.Contains(logs.String(), "legal hold") {
		t.Errorf("the email that could not be erased is not logged with its reason:\n%s", logs.String())
	}
	for i, id := range ids {
		recs, err := store.ReadStream(ctx, email.Stream(id), 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := recs[len(recs)-1].Type == (&email.Erased{}).EventType(), i >= failing; got != want {
			t.Errorf("email %d: erased %v, want %v", i, got, want)
		}
	}
}
