package httpapi

import (
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// FuzzQueryDates checks the date and time query parameters of the email
// list (date_from, date_to) and the daily stats (from, to) on any value:
// an accepted one is within the dates a query may name, the same value as
// date_from and date_to names a non-empty span (a bare date its whole day,
// a time its millisecond), and a stats range is 1 to 366 whole days.
func FuzzQueryDates(f *testing.F) {
	for _, s := range [][2]string{
		{"2025-01-02", "2025-01-31"},
		{"2025-01-02T03:04:05Z", "2025-01-02T03:04:05.123+01:00"},
		{"2025-01-02T03:04:05.123456789Z", "2025-01-02T03:04:05,5-05:30"},
		{"1970-01-01", "9999-12-31"},
		{"1970-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999-23:59"},
		{"9999-12-31T23:59:59.9999999Z", "1969-12-31"},
		{"2025-02-30", "2025-13-01"},
		{"2025-01-02T03:04:05+24:00", "2025-01-02T03:04:05+00:60"},
		{"2025-01-02T03:04:05", "2025-01-02 03:04:05Z"},
		{"0000-01-01", "+2025-01-01"},
		{"", " 2025-01-02"},
	} {
		f.Add(s[0], s[1])
	}
	e := echo.New()
	h := handlers{now: func() time.Time { return time.Date(2025, 6, 15, 12, 0, 0, 0, time.UTC) }}
	ctx := func(q url.Values) echo.Context {
		return e.NewContext(httptest.NewRequest("GET", "/?"+q.Encode(), nil), httptest.NewRecorder())
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, s := range []string{a, b} {
			c := ctx(url.Values{"date_from": {s}, "date_to": {s}})
			from, fromErr := queryDate(c, "date_from", false)
			to, toErr := queryDate(c, "date_to", true)
			if (fromErr == nil) != (toErr == nil) {
				t.Fatalf("%q: date_from error %v, date_to error %v", s, fromErr, toErr)
			}
			if fromErr != nil {
				if fromErr.Field != "date_from" || toErr.Field != "date_to" {
					t.Fatalf("%q: errors name %q and %q", s, fromErr.Field, toErr.Field)
				}
				continue
			}
			if s == "" {
				if !from.IsZero() || !to.IsZero() {
					t.Fatalf("an empty value gave %v, %v", from, to)
				}
				continue
			}
			if outOfRange("x", from) != nil {
				t.Fatalf("%q accepted as date_from %v, outside the dates a query may name", s, from)
			}
			if !from.Before(to) || to.Sub(from) > 24*time.Hour {
				t.Fatalf("%q as date_from and date_to spans %v to %v", s, from, to)
			}
		}

		// Stats: dates only, and a range of whole UTC days.
		from, to, err := h.statsDays(ctx(url.Values{"from": {a}, "to": {b}}))
		if err != nil {
			return
		}
		for _, d := range []time.Time{from, to} {
			if d.Location() != time.UTC || !d.Equal(d.Truncate(24*time.Hour)) || outOfRange("x", d) != nil {
				t.Fatalf("stats from %q to %q: day %v is not a UTC day within range", a, b, d)
			}
		}
		if days := int(to.Sub(from)/(24*time.Hour)) + 1; days < 1 || days > statsMaxDays {
			t.Fatalf("stats from %q to %q: %d days (%v to %v)", a, b, days, from, to)
		}
	})
}
