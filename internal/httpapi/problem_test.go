package httpapi

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/readapi"
)

func TestProblemOf(t *testing.T) {
	notVisible := httpserver.NewProblem(503, "not_yet_visible", commands.ErrNotVisible.Error())
	notVisible.RetryAfter = time.Second
	cases := []struct {
		name string
		err  error
		want *httpserver.Problem
	}{
		{"validation", &domain.ValidationError{Errors: []domain.FieldError{{Field: "to", Message: "is required"}}},
			httpserver.Validation(httpserver.FieldError{Field: "to", Message: "is required"})},
		{"conflict", &domain.ConflictError{Code: "domain_taken", Detail: "taken"}, httpserver.Conflict("domain_taken", "taken")},
		{"forbidden", &domain.ForbiddenError{Code: "domain_not_verified", Detail: "no"}, httpserver.Forbidden("domain_not_verified", "no")},
		{"domain not found", fmt.Errorf("load: %w", domain.ErrNotFound), httpserver.NotFound("no such resource")},
		{"read side not found", readapi.ErrNotFound, httpserver.NotFound("no such resource")},
		{"read side resource not found", &readapi.NotFoundError{Resource: "email"}, httpserver.NotFound("no such email")},
		{"limit", &commands.LimitError{Detail: "at most 10"}, httpserver.LimitExceeded("at most 10")},
		{"not visible", commands.ErrNotVisible, notVisible},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got *httpserver.Problem
			if !errors.As(problemOf(c.err), &got) {
				t.Fatalf("problemOf(%v) is not a problem", c.err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("problemOf(%v) = %+v, want %+v", c.err, got, c.want)
			}
		})
	}
}

func TestProblemOfPassesOtherErrors(t *testing.T) {
	for _, err := range []error{errors.New("database down"), httpserver.BadRequest("", "bad")} {
		if got := problemOf(err); got != err {
			t.Errorf("problemOf(%v) = %v, want it unchanged", err, got)
		}
	}
}
