package app_test

import (
	"testing"

	"github.com/mailroom/mailroom/internal/app/apptest"
)

// An id the account does not have is a 404 whose detail names the
// resource, on reads and writes alike.
func TestNotFoundDetails(t *testing.T) {
	s := apptest.Start(t)
	_, admin, key := s.Sender("example.com")
	for _, c := range []struct {
		method, path, credential string
		body                     any
		detail                   string
	}{
		{"GET", "/api/domains/nope", admin, nil, "no such domain"},
		{"POST", "/api/domains/nope/verify", admin, nil, "no such domain"},
		{"DELETE", "/api/domains/nope", admin, nil, "no such domain"},
		{"DELETE", "/api/auth/api-keys/nope", admin, nil, "no such API key"},
		{"DELETE", "/api/auth/tokens/nope", admin, nil, "no such management token"},
		{"GET", "/v1/emails/nope", key, nil, "no such email"},
		{"GET", "/v1/webhooks/nope", key, nil, "no such webhook endpoint"},
		{"GET", "/v1/webhooks/nope/deliveries?status=lost", key, nil, "no such webhook endpoint"},
		{"PATCH", "/v1/webhooks/nope", key, "{", "no such webhook endpoint"},
		{"DELETE", "/v1/webhooks/nope", key, nil, "no such webhook endpoint"},
		{"POST", "/v1/webhooks/nope/rotate-secret", key, nil, "no such webhook endpoint"},
		{"POST", "/v1/webhooks/nope/test", key, nil, "no such webhook endpoint"},
	} {
		r := s.Do(c.method, c.path, c.credential, c.body)
		wantProblem(t, r, 404, "not_found")
		p := r.JSON(t)
		if p["detail"] != c.detail || p["title"] != "Not Found" || p["type"] != "https://mailroom.dev/problems/not_found" {
			t.Errorf("%s %s: %s, want detail %q", c.method, c.path, r.Body, c.detail)
		}
		if _, ok := p["errors"]; ok {
			t.Errorf("%s %s: errors in %s", c.method, c.path, r.Body)
		}
	}
}
