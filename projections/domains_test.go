package projections_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// cols are some columns of a domain's row, compared as text; nil stands
// for NULL.
type cols map[string]any

// domainRow reads a domain's row as column values, times in UTC and
// arrays as lists of text; nil when there is no row.
func domainRow(t *testing.T, pool *pgxpool.Pool, id string) cols {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT * FROM domains WHERE id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		return nil
	}
	return normalize(found[0])
}

func normalize(m map[string]any) cols {
	c := cols{}
	for k, v := range m {
		switch v := v.(type) {
		case time.Time:
			c[k] = v.UTC().Format(time.RFC3339Nano)
		case nil:
			c[k] = nil
		default:
			c[k] = fmt.Sprint(v)
		}
	}
	return c
}

// allDomains reads every row of the domains table, by id.
func allDomains(t *testing.T, pool *pgxpool.Pool) []cols {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT * FROM domains ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]cols, len(found))
	for i, m := range found {
		all[i] = normalize(m)
	}
	return all
}

func checkCols(t *testing.T, step string, got, want cols) {
	t.Helper()
	var bad []string
	for k, w := range want {
		if tm, ok := w.(time.Time); ok {
			w = tm.UTC().Format(time.RFC3339Nano)
		} else if w != nil {
			w = fmt.Sprint(w)
		}
		g, ok := got[k]
		if !ok || g != w {
			bad = append(bad, fmt.Sprintf("%s = %v, want %v", k, g, w))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("after %s:\n\t%s", step, strings.Join(bad, "\n\t"))
	}
}

// A domain's life projects into the row's own columns step by step, the
// row reads back as the state the domain folds to, and a rebuild gives
// the same rows.
func TestDomainsProjectsEachStepIntoColumns(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	p := projections.Domains{}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	id, legacyID := uuid.NewString(), uuid.NewString()
	states := map[string]sendingdomain.State{}
	put := func(domainID string, e domain.Event) {
		t.Helper()
		data, err := codec.EncodeAll([]domain.Event{e}, eventstore.Metadata{Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Append(ctx, sendingdomain.Stream(domainID), eventstore.Any, data...)
		if err != nil {
			t.Fatal(err)
		}
		catchUpTo(t, r, p, res.Position)
		states[domainID] = sendingdomain.Evolve(states[domainID], e)
		got, err := readapi.New(pool, time.Now).Domain(ctx, states[domainID].AccountID, domainID)
		if !states[domainID].Exists() {
			if err == nil {
				t.Errorf("after %s: removed domain still read: %+v", e.EventType(), got)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		want := states[domainID]
		want.LastCheck = nil // decisions' alone: they read the stream, the read model does not keep it
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after %s: read back\n\t%+v\nwant\n\t%+v", e.EventType(), got, want)
		}
	}
	first := sendingdomain.Key{Selector: "mr1", PublicKey: "pub1", SealedKey: "sealed1", CreatedAt: at}
	second := sendingdomain.Key{Selector: "mr2", PublicKey: "pub2", SealedKey: "sealed2", CreatedAt: at.Add(30 * day)}
	noTransition := cols{"transition_kind": nil, "transition_state": nil, "transition_started_at": nil,
		"transition_cut_over_at": nil, "transition_old_key_retires_at": nil,
		"next_selector": nil, "next_public_key": nil, "next_sealed_key": nil, "next_created_at": nil,
		"old_selector": nil, "old_public_key": nil, "old_sealed_key": nil, "old_created_at": nil}
	with := func(a, b cols) cols {
		c := cols{}
		for k, v := range a {
			c[k] = v
		}
		for k, v := range b {
			c[k] = v
		}
		return c
	}

	put(id, &sendingdomain.Added{DomainID: id, AccountID: "acct", Name: "mail.example", Region: "eu-west-1",
		MailFromDomain: "bounce.mail.example", DkimMode: sendingdomain.BYODKIM, Key: &first, AddedAt: at, Deadline: at.Add(3 * day)})
	checkCols(t, "added", domainRow(t, pool, id), with(noTransition, cols{
		"id": id, "account_id": "acct", "name": "mail.example", "region": "eu-west-1", "mail_from_domain": "bounce.mail.example",
		"dkim_mode": "byodkim", "status": "pending", "dkim_ok": false, "mail_from_ok": false,
		"active_selector": "mr1", "active_public_key": "pub1", "active_sealed_key": "sealed1", "active_created_at": at,
		"legacy_tokens": nil, "created_at": at, "verification_deadline": at.Add(3 * day)}))

	put(id, &sendingdomain.Checked{DomainID: id, DkimOK: true, MailFromOK: false, CheckedAt: at.Add(time.Hour)})
	checkCols(t, "checked", domainRow(t, pool, id), cols{"status": "pending", "dkim_ok": true, "mail_from_ok": false})

	put(id, &sendingdomain.Verified{DomainID: id, Method: "sandbox", VerifiedAt: at.Add(2 * time.Hour)})
	checkCols(t, "verified", domainRow(t, pool, id), with(noTransition, cols{"status": "verified", "dkim_ok": true, "mail_from_ok": true}))

	started := at.Add(30 * day)
	put(id, &sendingdomain.KeyChangeStarted{DomainID: id, Kind: sendingdomain.Rotation, Key: second, StartedAt: started})
	checkCols(t, "key change started", domainRow(t, pool, id), with(noTransition, cols{
		"active_selector": "mr1", "active_sealed_key": "sealed1",
		"transition_kind": "rotation", "transition_state": "awaiting_dns", "transition_started_at": started,
		"next_selector": "mr2", "next_public_key": "pub2", "next_sealed_key": "sealed2", "next_created_at": second.CreatedAt}))

	cut, retires := started.Add(day), started.Add(8*day)
	put(id, &sendingdomain.KeyCutOver{DomainID: id, Kind: sendingdomain.Rotation, Selector: "mr2", OldSelector: "mr1",
		CutOverAt: cut, OldKeyRetiresAt: retires})
	checkCols(t, "cut over", domainRow(t, pool, id), cols{
		"dkim_mode": "byodkim", "status": "verified",
		"active_selector": "mr2", "active_public_key": "pub2", "active_sealed_key": "sealed2", "active_created_at": second.CreatedAt,
		"transition_kind": "rotation", "transition_state": "cut_over", "transition_started_at": started,
		"transition_cut_over_at": cut, "transition_old_key_retires_at": retires,
		"next_selector": "mr2", "next_sealed_key": "sealed2",
		"old_selector": "mr1", "old_public_key": "pub1", "old_sealed_key": "sealed1", "old_created_at": at})

	put(id, &sendingdomain.OldKeyRetired{DomainID: id, Selector: "mr1", RetiredAt: retires})
	checkCols(t, "old key retired", domainRow(t, pool, id), with(noTransition, cols{
		"status": "verified", "active_selector": "mr2", "active_sealed_key": "sealed2", "legacy_tokens": nil}))

	// A legacy domain has no key of its own until its upgrade cuts over,
	// and then no old key to keep.
	put(legacyID, &sendingdomain.Added{DomainID: legacyID, AccountID: "acct", Name: "old.example", Region: "us-east-1",
		MailFromDomain: "bounce.old.example", DkimMode: sendingdomain.Legacy, LegacyTokens: []string{"t1", "t2", "t3"},
		AddedAt: at, Deadline: at.Add(3 * day)})
	checkCols(t, "legacy added", domainRow(t, pool, legacyID), with(noTransition, cols{
		"dkim_mode": "legacy", "legacy_tokens": "[t1 t2 t3]",
		"active_selector": nil, "active_public_key": nil, "active_sealed_key": nil, "active_created_at": nil}))
	put(legacyID, &sendingdomain.Verified{DomainID: legacyID, Method: "dns", VerifiedAt: at.Add(time.Hour)})
	checkCols(t, "legacy verified", domainRow(t, pool, legacyID), cols{"status": "verified", "dkim_ok": false, "mail_from_ok": false})
	put(legacyID, &sendingdomain.KeyChangeStarted{DomainID: legacyID, Kind: sendingdomain.Upgrade, Key: second, StartedAt: started})
	put(legacyID, &sendingdomain.KeyCutOver{DomainID: legacyID, Kind: sendingdomain.Upgrade, Selector: "mr2",
		CutOverAt: cut, OldKeyRetiresAt: retires})
	checkCols(t, "upgrade cut over", domainRow(t, pool, legacyID), cols{
		"dkim_mode": "byodkim", "legacy_tokens": "[t1 t2 t3]", "active_selector": "mr2", "active_sealed_key": "sealed2",
		"transition_kind": "upgrade", "transition_state": "cut_over", "old_selector": nil, "old_sealed_key": nil})

	// The poller finds the domain in transition, not the settled one.
	work, err := readapi.DomainsToPoll(ctx, pool)
	if err != nil || len(work) != 1 || work[0].ID != legacyID || work[0].State.Transition == nil {
		t.Errorf("domains to poll: %+v %v", work, err)
	}

	rebuilt := func(step string) {
		t.Helper()
		before := allDomains(t, pool)
		if err := r.Rebuild(ctx, p, nil); err != nil {
			t.Fatal(err)
		}
		if after := allDomains(t, pool); !reflect.DeepEqual(after, before) {
			t.Errorf("%s, rebuilt rows differ:\n\t%v\nwere\n\t%v", step, after, before)
		}
	}
	rebuilt("in transition")

	put(id, &sendingdomain.Removed{DomainID: id, AccountID: "acct", Name: "mail.example", RemovedAt: retires.Add(day)})
	if row := domainRow(t, pool, id); row != nil {
		t.Errorf("removed domain left its row: %v", row)
	}
	if n := len(allDomains(t, pool)); n != 1 {
		t.Errorf("%d rows after the removal, want 1", n)
	}
	rebuilt("after removal")
}
