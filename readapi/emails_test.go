package readapi_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// The list's to filter matches part of one recipient in any case, takes
// %, _ and \ literally, and never matches across two recipients: served
// by the trigram index, and the same on a server without pg_trgm.
func TestListEmailsFilterByRecipient(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t) // migrated, pg_trgm created
	store := memory.New()
	defer store.Close()
	runner := projections.NewRunner(pool, store, nil, slog.New(slog.DiscardHandler), projections.Emails{})
	if err := runner.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	var indexed bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('emails_to_trgm_idx') IS NOT NULL").Scan(&indexed); err != nil || !indexed {
		t.Fatalf("no trigram index of the recipients (%v)", err)
	}

	emails := []struct {
		id, account string
		to          []string
	}{
		{"ann", "acct-1", []string{"Ann Lee <Ann@Example.org>", "bob@example.net"}},
		{"percent", "acct-1", []string{"carol%smith@example.org"}},
		{"carol", "acct-1", []string{"carolXsmith@example.org"}},
		{"underscore", "acct-1", []string{"dan_x@example.org"}},
		{"dan", "acct-1", []string{"danzx@example.org"}},
		{"backslash", "acct-1", []string{`"Back\slash" <bs@example.org>`}},
		{"slash", "acct-1", []string{"slasher@example.org"}},
		{"other", "acct-2", []string{"ann@example.org"}},
	}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, e := range emails {
		if _, err := pool.Exec(ctx, `INSERT INTO emails (id, account_id, from_email, to_email, to_addresses, subject,
				status, top_status, top_rank, top_at, created_at)
			VALUES ($1, $2, 'a@acme.test', array_to_string($3::text[], ', '), $3, 's', 'queued', 'queued', 0, $4, $4)`,
			e.id, e.account, e.to, base.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}

	cases := map[string][]string{
		"ann@EXAMPLE":   {"ann"},
		"EXAMPLE.NET":   {"ann"},
		"org>, bob":     nil, // as to_email shows them, across two recipients
		"org>\nbob":     nil, // across the line between them in the index's text
		"org%bob":       nil,
		"carol%smith":   {"percent"},
		"dan_x":         {"underscore"},
		`\slash`:        {"backslash"},
		"slash":         {"backslash", "slash"},
		"n@e":           {"ann"},               // no trigram in it
		"x@":            {"underscore", "dan"}, // too short for trigrams
		"@example.org>": {"ann", "backslash"},
	}
	check := func(when string) {
		t.Helper()
		r := readapi.New(pool, time.Now)
		for pattern, want := range cases {
			page, err := r.ListEmails(ctx, "acct-1", readapi.EmailFilter{To: pattern, Page: 1, PerPage: 100})
			if err != nil {
				t.Fatalf("%s: to=%q: %v", when, pattern, err)
			}
			var got []string
			for _, e := range page.Emails {
				got = append(got, e.ID)
			}
			slices.Sort(got)
			want = slices.Sorted(slices.Values(want))
			if !slices.Equal(got, want) || page.Total != len(want) {
				t.Errorf("%s: to=%q: %v (total %d), want %v", when, pattern, got, page.Total, want)
			}
		}
	}
	check("with the trigram index")
	if _, err := pool.Exec(ctx, "DROP EXTENSION pg_trgm CASCADE"); err != nil { // and the index with it
		t.Fatal(err)
	}
	if err := runner.Prepare(ctx); err != nil { // a start without it
		t.Fatal(err)
	}
	check("without pg_trgm")
}

// The to filter finds a recipient however its domain is written, in
// Unicode or in punycode, and whichever way its accents were typed
// (composed or not): the list finds the email sent to an address that
// webhooks and the timeline give in punycode.
func TestListEmailsFilterFindsEverySpellingOfARecipient(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := memory.New()
	defer store.Close()
	runner := projections.NewRunner(pool, store, nil, slog.New(slog.DiscardHandler), projections.Emails{})
	if err := runner.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	decomposed := "Zoe\u0308 <zoe@example.org>" // ë as e and a combining diaeresis
	sent := map[string]string{
		"ann": "Ann <ann@bücher.example>",
		"bob": "bob@xn--mnchen-3ya.example",
		"zoe": decomposed,
	}
	var last eventstore.Position
	for id, to := range sent {
		data, err := codec.EncodeAll([]domain.Event{&email.Queued{EmailID: id, AccountID: "acct", From: "a@acme.test",
			FromEmail: "a@acme.test", To: []string{to}, Subject: "s", QueuedAt: time.Now().UTC()}}, eventstore.Metadata{Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Append(ctx, email.Stream(id), eventstore.NoStream, data...)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Position
	}
	for {
		at, err := runner.CatchUp(ctx, projections.Emails{})
		if err != nil {
			t.Fatal(err)
		}
		if !at.Less(last) {
			break
		}
	}
	cases := map[string][]string{
		"ann@bücher.example":        {"ann"},
		"ann@xn--bcher-kva.example": {"ann"},
		"xn--bcher":                 {"ann"},
		"bu\u0308cher":              {"ann"}, // typed decomposed
		"bob@münchen.example":       {"bob"},
		"bob@xn--mnchen-3ya":        {"bob"},
		"münchen":                   {"bob"},
		"Zoë <zoe":                  {"zoe"}, // typed composed
		decomposed:                  {"zoe"},
		"example":                   {"ann", "bob", "zoe"},
	}
	r := readapi.New(pool, time.Now)
	for pattern, want := range cases {
		page, err := r.ListEmails(ctx, "acct", readapi.EmailFilter{To: pattern, Page: 1, PerPage: 100})
		if err != nil {
			t.Fatalf("to=%q: %v", pattern, err)
		}
		var got []string
		for _, e := range page.Emails {
			got = append(got, e.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || page.Total != len(want) {
			t.Errorf("to=%q: %v (total %d), want %v", pattern, got, page.Total, want)
		}
		if page.Total == 1 && page.Emails[0].ToEmail != sent[want[0]] {
			t.Errorf("to=%q: the list shows to %q, want it as sent, %q", pattern, page.Emails[0].ToEmail, sent[want[0]])
		}
	}
}
