package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/readapi"
)

// answering applies problemOf to whatever a handler returns.
func answering(h echo.HandlerFunc, resource string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := h(c); err != nil {
			return problemOf(err, resource)
		}
		return nil
	}
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
	case errors.Is(err, commands.ErrNotVisible):
		p := httpserver.NewProblem(http.StatusServiceUnavailable, "not_yet_visible", err.Error())
		p.RetryAfter = time.Second
		return p
	}
	return err
}
