package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
)

// Daily stats cover at most statsMaxDays days, the last statsDefaultDays
// when not asked otherwise.
const (
	statsMaxDays     = 366
	statsDefaultDays = 30
)

func (h handlers) dailyStats(c echo.Context) error {
	from, to, err := h.statsDays(c)
	if err != nil {
		return err
	}
	days, err := h.reads.DailyStats(c.Request().Context(), authn.From(c).AccountID, from, to)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": days})
}

// statsDays reads from and to (UTC dates, both included): by default the
// last 30 days ending today, or 30 days on either side of the one given.
func (h handlers) statsDays(c echo.Context) (from, to time.Time, err error) {
	from, fromErr := queryDay(c, "from")
	to, toErr := queryDay(c, "to")
	if err := validationOf(fromErr, toErr); err != nil {
		return from, to, err
	}
	switch {
	case from.IsZero() && to.IsZero():
		to = h.now().UTC().Truncate(24 * time.Hour)
		from = to.AddDate(0, 0, 1-statsDefaultDays)
	case from.IsZero():
		from = to.AddDate(0, 0, 1-statsDefaultDays)
		if from.Before(firstQueryDay) {
			from = firstQueryDay
		}
	case to.IsZero():
		to = from.AddDate(0, 0, statsDefaultDays-1)
		if to.After(lastQueryDay) {
			to = lastQueryDay
		}
	}
	if to.Before(from) {
		return from, to, validationOf(&httpserver.FieldError{Field: "to", Message: "must not be before from"})
	}
	if days := int(to.Sub(from).Hours()/24) + 1; days > statsMaxDays {
		return from, to, validationOf(&httpserver.FieldError{Field: "to", Message: "must be at most 366 days after from, counting both"})
	}
	return from, to, nil
}

// queryDay reads a date (YYYY-MM-DD) as the start of its UTC day.
func queryDay(c echo.Context, name string) (time.Time, *httpserver.FieldError) {
	s, bad := httpserver.Query(c, name)
	if s == "" {
		return time.Time{}, bad
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, &httpserver.FieldError{Field: name, Message: "must be a date (YYYY-MM-DD)"}
	}
	return t, outOfRange(name, t)
}
