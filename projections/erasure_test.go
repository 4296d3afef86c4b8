package projections_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/sealed"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// erasureWorld is an email log sealed as the service seals it, so that
// destroying an email's key erases its personal data from what a rebuild
// reads.
type erasureWorld struct {
	pool    *pgxpool.Pool
	inner   eventstore.Store
	box     *secretbox.Box
	keyring *datakeys.Keyring
	keys    datakeys.AddressKeys
	last    eventstore.Position
}

func newErasureWorld(t *testing.T) *erasureWorld {
	pool, inner := setup(t)
	master := make([]byte, 32)
	master[0] = 7
	box, err := secretbox.New(master)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := datakeys.NewAddressKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	return &erasureWorld{pool: pool, inner: inner, box: box, keyring: datakeys.New(pool, box), keys: keys}
}

// store reads the log with a keyring of its own, as a new process would.
func (w *erasureWorld) store() eventstore.Store {
	return sealed.New(w.inner, datakeys.New(w.pool, w.box))
}

func (w *erasureWorld) append(t *testing.T, id string, evs ...domain.Event) {
	t.Helper()
	data, err := codec.EncodeAll(evs, eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sealed.New(w.inner, w.keyring).Append(context.Background(), email.Stream(id), eventstore.Any, data...)
	if err != nil {
		t.Fatal(err)
	}
	w.last = res.Position
}

var erasureTables = []tableOrder{{"emails", "id"}, {"email_events", "event_id"},
	{"suppressions", "account_id, address_key"}, {"email_daily_stats", "account_id, day"}}

// An erased email leaves the list and its timeline; its daily counts stay,
// and the address it bounced stays suppressed by its key. A rebuild after
// its key is destroyed, in batches or event by event, gives the same tables.
func TestErasedEmailsKeepTheirCountsAndSuppressions(t *testing.T) {
	w := newErasureWorld(t)
	ctx := context.Background()
	const acct = "acct-1"
	day1 := time.Date(2026, 11, 20, 23, 59, 59, 0, time.UTC)
	day2 := day1.Add(time.Hour)
	ann, bob := uuid.NewString(), uuid.NewString()
	annKey := w.keys.Of(acct, "ann@example.org")
	w.append(t, ann,
		&email.Queued{EmailID: ann, AccountID: acct, From: "a@acme.test", FromEmail: "a@acme.test", To: []string{"Ann <Ann@Example.org>"},
			Subject: "hello Ann", QueuedAt: day1.Add(-time.Minute), RecipientKeys: []string{annKey}},
		&email.Sent{EmailID: ann, ProviderMessageID: "p-ann", SentAt: day1},
		&email.Bounced{EmailID: ann, FeedbackID: "f1", BounceType: "Permanent", BounceSubtype: "General",
			Recipients: []string{"ann@example.org"}, RecipientKeys: []string{annKey}, OccurredAt: day2},
		&email.Opened{EmailID: ann, FeedbackID: "f2", OccurredAt: day2},
		&email.Opened{EmailID: ann, FeedbackID: "f3", OccurredAt: day2},
	)
	// Recorded before events carried keys: they are computed.
	w.append(t, bob,
		&email.Queued{EmailID: bob, AccountID: acct, From: "a@acme.test", FromEmail: "a@acme.test", To: []string{"Bob <Bob@Example.org>"},
			Bcc: []string{"carl@example.org"}, Subject: "hello Bob", QueuedAt: day1.Add(-time.Minute)},
		&email.Sent{EmailID: bob, ProviderMessageID: "p-bob", SentAt: day1},
		&email.Delivered{EmailID: bob, FeedbackID: "f4", Recipients: []string{"bob@example.org"}, OccurredAt: day2},
		&email.Bounced{EmailID: bob, FeedbackID: "f5", BounceType: "Transient", Recipients: []string{"carl@example.org"}, OccurredAt: day2},
		&email.Complained{EmailID: bob, FeedbackID: "f6", Recipients: []string{"Carl@Example.org"}, OccurredAt: day2},
		&email.Clicked{EmailID: bob, FeedbackID: "f7", Link: "https://acme.test/", OccurredAt: day2},
	)
	// Live, the projector reads ann's events before her key is destroyed.
	p := projections.Emails{Keys: w.keys}
	// The accounts and domains tables are there for the send checks.
	runner := projections.NewRunner(w.pool, w.store(), nil, quiet, p, projections.Accounts{}, projections.Domains{})
	if err := runner.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, runner, p, w.last)
	if err := w.keyring.Destroy(ctx, codec.KeyID(ann), acct); err != nil {
		t.Fatal(err)
	}
	w.append(t, ann, &email.Erased{EmailID: ann, AccountID: acct, Reason: email.ErasedOnRequest, ErasureID: "er-1", ErasedAt: day2.Add(time.Hour)})
	catchUpTo(t, runner, p, w.last)
	live := tablesJSON(t, w.pool, erasureTables)

	var emails []string
	if err := w.pool.QueryRow(ctx, `SELECT array_agg(id) FROM emails`).Scan(&emails); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(emails, []string{bob}) {
		t.Fatalf("emails %v, want only %s", emails, bob)
	}
	var timeline int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM email_events WHERE email_id = $1`, ann).Scan(&timeline); err != nil {
		t.Fatal(err)
	}
	if timeline != 0 {
		t.Fatalf("the erased email keeps %d timeline rows", timeline)
	}
	type suppression struct {
		Key    string
		Email  *string
		Reason string
	}
	rows, _ := w.pool.Query(ctx, `SELECT address_key, email, reason FROM suppressions ORDER BY reason`)
	sups, err := pgx.CollectRows(rows, pgx.RowToStructByPos[suppression])
	if err != nil {
		t.Fatal(err)
	}
	if len(sups) != 2 || sups[0].Key != annKey || sups[0].Email != nil || sups[0].Reason != "bounce" ||
		sups[1].Key != w.keys.Of(acct, "carl@example.org") || sups[1].Email == nil || *sups[1].Email != "carl@example.org" {
		t.Fatalf("suppressions %+v: want ann's by key alone and carl's with the address", sups)
	}
	checks, err := readapi.EmailChecks(ctx, w.pool, w.keys, bob, acct, "", "acme.test", []string{"ann@example.org", "CARL@example.org", "bob@example.org"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(checks.Suppressed, []string{"ann@example.org", "carl@example.org"}) || checks.Unlisted {
		t.Fatalf("checks %+v, want ann (erased) and carl suppressed, and bob's email listed", checks)
	}
	// The erased email is no longer listed: the pipeline's last check
	// before the provider hears of its erasure.
	if checks, err := readapi.EmailChecks(ctx, w.pool, w.keys, ann, acct, "", "acme.test", nil); err != nil || !checks.Unlisted {
		t.Fatalf("checks of the erased email: %+v, %v", checks, err)
	}
	r := readapi.New(w.pool, time.Now)
	stats, err := r.DailyStats(ctx, acct, day1, day2.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []readapi.DayStats{
		{Date: "2026-11-20", Sent: 2},
		{Date: "2026-11-21", Delivered: 1, Bounced: 1, Complained: 1, Opened: 2, Clicked: 1},
		{Date: "2026-11-22"},
	}
	if !slices.Equal(stats, want) {
		t.Fatalf("daily stats %+v, want %+v", stats, want)
	}
	for _, who := range []struct{ address, want string }{{"carl@example.org", bob}, {"bob@example.org", bob}, {"ann@example.org", ""}} {
		ids, err := r.EmailsSentTo(ctx, acct, w.keys.Of(acct, who.address))
		if err != nil {
			t.Fatal(err)
		}
		if (who.want == "" && len(ids) != 0) || (who.want != "" && !slices.Equal(ids, []string{who.want})) {
			t.Fatalf("emails sent to %s: %v, want %q", who.address, ids, who.want)
		}
	}

	// Rebuilt from the log as it is now, ann's events erased.
	store := w.store()
	batched := projections.NewRunner(w.pool, store, nil, quiet, p)
	if err := batched.Rebuild(ctx, p, nil); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, batched, p, w.last)
	w.sameAs(t, "rebuilt in batches", live)
	one := rowByRow{p}
	byEvent := projections.NewRunner(w.pool, store, nil, quiet, one)
	if err := byEvent.Rebuild(ctx, one, nil); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, byEvent, one, w.last)
	w.sameAs(t, "rebuilt event by event", live)
}

func (w *erasureWorld) sameAs(t *testing.T, how string, want []string) {
	t.Helper()
	got := tablesJSON(t, w.pool, erasureTables)
	for i, tb := range erasureTables {
		if got[i] != want[i] {
			t.Errorf("%s %s:\n%s\nwant as projected live\n%s", tb.name, how, got[i], want[i])
		}
	}
}

// An account's retention reads back with the account, and decides which of
// its emails are past it; accounts without one keep the default.
func TestEmailsPastRetention(t *testing.T) {
	w := newErasureWorld(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	data, err := codec.EncodeAll([]domain.Event{
		&account.Created{AccountID: "short", Name: "Short", CreatedAt: now.AddDate(0, -1, 0)},
		&account.RetentionSet{AccountID: "short", Days: 7, SetAt: now.AddDate(0, 0, -1)},
	}, eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.inner.Append(ctx, account.Stream("short"), eventstore.NoStream, data...); err != nil {
		t.Fatal(err)
	}
	queue := func(acct string, age time.Duration) string {
		id := uuid.NewString()
		w.append(t, id, &email.Queued{EmailID: id, AccountID: acct, From: "a@acme.test", FromEmail: "a@acme.test",
			To: []string{"x@example.org"}, Subject: "s", QueuedAt: now.Add(-age)})
		return id
	}
	const day = 24 * time.Hour
	shortOld := queue("short", 8*day)
	queue("short", 6*day)
	defaultOld := queue("other", 31*day)
	shortOlder := queue("short", 20*day)
	queue("other", 29*day)

	r := projections.NewRunner(w.pool, w.store(), nil, quiet, projections.Emails{Keys: w.keys}, projections.Accounts{})
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Projectors() {
		catchUpTo(t, r, p, w.last)
	}
	reads := readapi.New(w.pool, time.Now)
	got, err := reads.EmailsPastRetention(ctx, 30, now, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(es []readapi.ExpiredEmail) (out []string) {
		for _, e := range es {
			out = append(out, e.AccountID+"/"+e.EmailID)
		}
		return out
	}
	want := []string{"other/" + defaultOld, "short/" + shortOlder, "short/" + shortOld}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("past retention %v, want %v", ids(got), want)
	}
	first, _ := reads.EmailsPastRetention(ctx, 30, now, nil, 1)
	if !slices.Equal(ids(first), want[:1]) {
		t.Fatalf("the first past retention %v, want %v", ids(first), want[:1])
	}
	// The next page starts after the last one's end.
	if rest, _ := reads.EmailsPastRetention(ctx, 30, now, &first[0], 10); !slices.Equal(ids(rest), want[1:]) {
		t.Fatalf("past retention after the first %v, want %v", ids(rest), want[1:])
	}
	acct, err := reads.Account(ctx, "short")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Name != "Short" || acct.Status != "active" || acct.RetentionDays == nil || *acct.RetentionDays != 7 {
		t.Fatalf("account %+v, want Short, active, 7 days", acct)
	}
	if _, err := reads.Account(ctx, "other"); !errors.Is(err, readapi.ErrNotFound) {
		t.Fatalf("an account never created: %v, want not found", err)
	}
}
