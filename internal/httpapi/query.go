package httpapi

import (
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/httpserver"
)

// The dates a query may name. Nothing Mailroom holds is older than the
// first, a bound outside them is a mistake, and the zero time.Time (year 1)
// stays free to mean "not given".
var (
	firstQueryDay = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	lastQueryDay  = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// outOfRange refuses a date or time outside firstQueryDay..lastQueryDay.
func outOfRange(name string, t time.Time) *httpserver.FieldError {
	if t.Before(firstQueryDay) || !t.Before(lastQueryDay.AddDate(0, 0, 1)) {
		return &httpserver.FieldError{Field: name, Message: "must be between 1970-01-01 and 9999-12-31"}
	}
	return nil
}

// queryDate reads an ISO date (YYYY-MM-DD) or timestamp. A bare date_to
// includes its whole day.
func queryDate(c echo.Context, name string, endOfDay bool) (time.Time, *httpserver.FieldError) {
	s, bad := httpserver.Query(c, name)
	if s == "" {
		return time.Time{}, bad
	}
	// RFC 3339 allows "t" and "z" in lower case; they are its only letters.
	s = strings.ToUpper(s)
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		if bad := outOfRange(name, t); bad != nil {
			return time.Time{}, bad
		}
		if endOfDay {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil && rfc3339Zone.MatchString(s) {
		if bad := outOfRange(name, t); bad != nil {
			return time.Time{}, bad
		}
		if endOfDay {
			// A date_to includes the whole unit it is written to, as a
			// bare date includes its whole day: 23:59:59Z the whole second,
			// .793Z (as answers show times) the whole millisecond. One
			// written finer than the millisecond is taken as given (times
			// are kept to the microsecond).
			digits := 0
			if m := fraction.FindStringSubmatch(s); m != nil {
				digits = len(m[1])
			}
			if digits <= 3 {
				unit := time.Second
				for range digits {
					unit /= 10
				}
				t = t.Add(unit)
			} else {
				t = t.Truncate(time.Microsecond).Add(time.Microsecond)
			}
		}
		return t, nil
	}
	return time.Time{}, &httpserver.FieldError{Field: name, Message: "must be a date (YYYY-MM-DD) or an RFC 3339 timestamp with seconds and a zone (2026-01-31T09:30:00Z, or +01:00 for the zone)"}
}

// rfc3339Zone is a timestamp's zone as RFC 3339 writes it: Go's parser
// also takes offsets of 24 hours and of 60 minutes.
var rfc3339Zone = regexp.MustCompile(`(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

// fraction is a timestamp's fraction of a second, as written.
var fraction = regexp.MustCompile(`[.,]([0-9]+)`)

// validationOf collects query-parameter errors into one 422.
func validationOf(errs ...*httpserver.FieldError) error {
	var out []httpserver.FieldError
	for _, e := range errs {
		if e != nil {
			out = append(out, *e)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return httpserver.Validation(out...)
}
