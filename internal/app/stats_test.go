package app_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type dayStats struct {
	Date                                                  string
	Sent, Delivered, Bounced, Complained, Opened, Clicked int
}

func dailyStats(t *testing.T, w *sendWorld, credential, query string) []dayStats {
	t.Helper()
	r := w.Do("GET", "/api/stats/daily"+query, credential, nil)
	if r.Status != 200 {
		t.Fatalf("GET /api/stats/daily%s: %d %s", query, r.Status, r.Body)
	}
	var body struct{ Data []dayStats }
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Data
}

// The daily stats count an account's sends on the day they left, every day
// of the range answered, and only for the account asking.
func TestDailyStats(t *testing.T) {
	w := newSendWorld(t)
	sent := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "hi", "text": "hello"})
	w.waitFor(t, sent["id"].(string), func(e map[string]any) bool { return e["sent_at"] != nil })

	days := dailyStats(t, w, w.admin, "")
	today := time.Now().UTC().Format(time.DateOnly)
	if len(days) != 30 || days[29].Date != today || days[0].Date != time.Now().UTC().AddDate(0, 0, -29).Format(time.DateOnly) {
		t.Fatalf("by default %d days from %v, want the 30 ending today %s", len(days), days[0], today)
	}
	if days[29].Sent != 1 {
		t.Fatalf("today %+v, want one sent", days[29])
	}
	for _, d := range days[:29] {
		if d != (dayStats{Date: d.Date}) {
			t.Fatalf("%+v counts what was sent today", d)
		}
	}
	one := dailyStats(t, w, w.admin, "?from="+today+"&to="+today)
	if len(one) != 1 || one[0] != days[29] {
		t.Fatalf("today alone %+v, want %+v", one, days[29])
	}
	_, otherAdmin := w.Account("Other")
	if other := dailyStats(t, w, otherAdmin, "?from="+today+"&to="+today); len(other) != 1 || other[0] != (dayStats{Date: today}) {
		t.Fatalf("another account's today %+v, want zeros", other)
	}
	// The last day there is: the days after it are not counted.
	if end := dailyStats(t, w, w.admin, "?from=9999-12-30"); len(end) != 2 || end[1].Date != "9999-12-31" {
		t.Fatalf("from the second to last day: %+v", end)
	}
	// Likewise the first: nothing before it is counted.
	if start := dailyStats(t, w, w.admin, "?to=1970-01-02"); len(start) != 2 || start[0].Date != "1970-01-01" {
		t.Fatalf("to the second day: %+v", start)
	}
	if year := dailyStats(t, w, w.admin, "?from=2024-01-01&to=2024-12-31"); len(year) != 366 || year[365].Date != "2024-12-31" {
		t.Fatalf("a leap year gives %d days", len(year))
	}
}

func TestDailyStatsRefusesBadRanges(t *testing.T) {
	w := newSendWorld(t)
	for _, c := range []struct{ query, field string }{
		{"?from=2026-13-01", "from"},
		{"?to=yesterday", "to"},
		{"?from=2024-01-01&to=2025-01-01", "to"},
		{"?from=2026-02-02&to=2026-02-01", "to"},
		{"?from=0001-01-01&to=0001-01-02", "from"},
		{"?to=0001-01-20", "to"},
		{"?from=1969-12-31", "from"},
	} {
		r := w.Do("GET", "/api/stats/daily"+c.query, w.admin, nil)
		wantProblem(t, r, 422, "validation_failed")
		if !strings.Contains(string(r.Body), `"field":"`+c.field+`"`) {
			t.Fatalf("%s: %s, want an error on %s", c.query, r.Body, c.field)
		}
	}
	if r := w.Do("GET", "/api/stats/daily", w.key, nil); r.Status != 401 && r.Status != 403 {
		t.Fatalf("an API key: %d, want refused", r.Status)
	}
}
