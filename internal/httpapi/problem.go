package httpapi

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/readapi"
)

// answering applies problemOf to whatever a handler returns, once the
// request's URL has passed checkURL.
func answering(h echo.HandlerFunc, resource string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := checkURL(c, resource); err != nil {
			return err
		}
		if err := h(c); err != nil {
			return problemOf(err, resource)
		}
		return nil
	}
}

// canonicalIDs writes ids that are UUIDs in capitals (as some databases and
// languages print them) as Mailroom does, in lower case: UUIDs are read
// without regard to case (RFC 9562), and an id so written names the same
// thing.
func canonicalIDs(values []string) []string {
	for i, v := range values {
		if u, err := uuid.Parse(v); err == nil && len(v) == 36 {
			values[i] = u.String()
		}
	}
	return values
}

// checkURL refuses what no handler could take from the URL: an id that is
// not text cannot name anything (404), a query string that does not parse
// would otherwise lose the pairs it cannot read, filters included, without
// a word (400), and a query value must be text like any field (422).
func checkURL(c echo.Context, resource string) error {
	for _, name := range c.ParamNames() {
		if domain.TextProblem(c.Param(name), false) != "" {
			return httpserver.NotFound("no such " + resource)
		}
	}
	c.SetParamValues(canonicalIDs(c.ParamValues())...)
	values, err := url.ParseQuery(c.Request().URL.RawQuery)
	if err != nil {
		return httpserver.BadRequest("invalid_query", "the query string cannot be read: "+err.Error())
	}
	var bad []httpserver.FieldError
	for _, name := range slices.Sorted(maps.Keys(values)) {
		for _, v := range values[name] {
			if p := domain.TextProblem(v, false); p != "" {
				bad = append(bad, httpserver.FieldError{Field: strings.ToValidUTF8(name, "\ufffd"), Message: p})
				break
			}
		}
	}
	if len(bad) > 0 {
		return httpserver.Validation(bad...)
	}
	return nil
}

// problemOf translates a refusal of the domain, the commands or the read
// side into its problem. Any other error (problems the handlers built
// themselves included) passes unchanged to the server's error handler.
func problemOf(err error, resource string) error {
	var v *domain.ValidationError
	var conflict *domain.ConflictError
	var forbidden *domain.ForbiddenError
	var missing *readapi.NotFoundError
	var limit *commands.LimitError
	var lookup *commands.LookupUnavailableError
	switch {
	case errors.As(err, &v):
		fields := make([]httpserver.FieldError, len(v.Errors))
		for i, f := range v.Errors {
			fields[i] = httpserver.FieldError{Field: f.Field, Message: f.Message}
		}
		return httpserver.Validation(fields...)
	case errors.As(err, &conflict):
		return httpserver.Conflict(conflict.Code, conflict.Detail)
	case errors.As(err, &forbidden):
		return httpserver.Forbidden(forbidden.Code, forbidden.Detail)
	case errors.As(err, &missing): // before ErrNotFound, which it also is
		return httpserver.NotFound("no such " + missing.Resource)
	case errors.Is(err, domain.ErrNotFound):
		return httpserver.NotFound("no such " + resource)
	case errors.As(err, &limit):
		return httpserver.LimitExceeded(limit.Detail)
	case errors.Is(err, eventstore.ErrTooLarge):
		return httpserver.TooLarge("the request makes a record larger than the event store takes in one write; shorten its text fields (names, subject, tags, file names)")
	case errors.As(err, &lookup):
		p := httpserver.NewProblem(http.StatusServiceUnavailable, "lookup_unavailable", lookup.Error())
		p.RetryAfter = 5 * time.Second
		return p
	case eventstore.IsConflict(err):
		// Other writes to the same stream kept winning the race, past
		// every retry: a passing contention, not a fault.
		p := httpserver.NewProblem(http.StatusServiceUnavailable, "write_contention",
			"other changes to the same resource were being recorded at the same time; retry shortly")
		p.RetryAfter = time.Second
		return p
	case errors.Is(err, commands.ErrNotVisible):
		p := httpserver.NewProblem(http.StatusServiceUnavailable, "not_yet_visible", err.Error())
		p.RetryAfter = time.Second
		return p
	}
	return err
}
