package httpapi

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/readapi"
)

func TestProblemOf(t *testing.T) {
	notVisible := httpserver.NewProblem(503, "not_yet_visible", commands.ErrNotVisible.Error())
	notVisible.RetryAfter = time.Second
	contention := httpserver.NewProblem(503, "write_contention", "other changes to the same resource were being recorded at the same time; retry shortly")
	contention.RetryAfter = time.Second
	lookup := &commands.LookupUnavailableError{Field: "url", Reason: "host lookup timed out"}
	lookupProblem := httpserver.NewProblem(503, "lookup_unavailable", lookup.Error())
	lookupProblem.RetryAfter = 5 * time.Second
	cases := []struct {
		name string
		err  error
		want *httpserver.Problem
	}{
		{"validation", &domain.ValidationError{Errors: []domain.FieldError{{Field: "to", Message: "is required"}}},
			httpserver.Validation(httpserver.FieldError{Field: "to", Message: "is required"})},
		{"conflict", &domain.ConflictError{Code: "domain_taken", Detail: "taken"}, httpserver.Conflict("domain_taken", "taken")},
		{"forbidden", &domain.ForbiddenError{Code: "domain_not_verified", Detail: "no"}, httpserver.Forbidden("domain_not_verified", "no")},
		{"domain not found", fmt.Errorf("load: %w", domain.ErrNotFound), httpserver.NotFound("no such webhook endpoint")},
		{"read side not found", readapi.ErrNotFound, httpserver.NotFound("no such webhook endpoint")},
		{"read side resource not found", &readapi.NotFoundError{Resource: "email"}, httpserver.NotFound("no such email")},
		{"limit", &commands.LimitError{Detail: "at most 10"}, httpserver.LimitExceeded("at most 10")},
		{"not visible", commands.ErrNotVisible, notVisible},
		{"write contention past every retry", fmt.Errorf("append to account-1: %w", &eventstore.ConflictError{Stream: "account-1"}), contention},
		{"lookup unavailable", lookup, lookupProblem},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got *httpserver.Problem
			if !errors.As(problemOf(c.err, "webhook endpoint"), &got) {
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
		if got := problemOf(err, "email"); got != err {
			t.Errorf("problemOf(%v) = %v, want it unchanged", err, got)
		}
	}
}

// Every route of a resource names it in its 404s, whichever layer found
// nothing.
func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/webhooks/:id":       "webhook endpoint",
		"/webhooks/:id/test":  "webhook endpoint",
		"/domains/:id/rotate": "domain",
		"/auth/api-keys/:id":  "API key",
		"/auth/tokens/:id":    "management token",
		"/emails/:id":         "email",
		"/emails/send":        "resource",
		"/webhooks":           "resource",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
