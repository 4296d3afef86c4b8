package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// A name held by another account's pending domain is freed by the
// operator's release, and its owner can then add it; a verified domain's
// name is not released.
func TestDomainsRelease(t *testing.T) {
	db := pgtest.NewURL(t)
	s := apptest.StartWith(t, apptest.Config(t, db))
	_, squatter := s.Account("Squatter")
	_, owner := s.Account("Owner")
	held := s.Do("POST", "/api/domains", squatter, map[string]any{"domain": "victim-corp.test"})
	if held.Status != 201 {
		t.Fatalf("add: %d %s", held.Status, held.Body)
	}
	heldID := held.JSON(t)["id"].(string)
	if r := s.Do("POST", "/api/domains", owner, map[string]any{"domain": "victim-corp.test"}); r.Status != 409 {
		t.Fatalf("the owner adding a held name: %d %s", r.Status, r.Body)
	}

	flags := []string{"--database-url", db, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey}
	out, _, err := run(t, append([]string{"domains", "release", "Victim-Corp.test.", "--json"}, flags...)...)
	var got struct {
		Domain  string `json:"domain"`
		Removed []struct {
			DomainID  string `json:"domain_id"`
			AccountID string `json:"account_id"`
			Status    string `json:"status"`
		} `json:"removed"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("domains release: %q %v", out, err)
	}
	if got.Domain != "victim-corp.test" || len(got.Removed) != 1 || got.Removed[0].DomainID != heldID || got.Removed[0].Status != "pending" {
		t.Fatalf("released %s", out)
	}
	if r := s.Do("GET", "/api/domains/"+heldID, squatter, nil); r.Status != 404 {
		t.Fatalf("the released domain: %d %s", r.Status, r.Body)
	}
	if r := s.Do("POST", "/api/domains", owner, map[string]any{"domain": "victim-corp.test"}); r.Status != 201 {
		t.Fatalf("the owner adding the released name: %d %s", r.Status, r.Body)
	}

	// The removal is the operator's, in the domain's history.
	hist, _, err := run(t, append([]string{"events", "export", "--stream", "domain-" + heldID}, flags...)...)
	if err != nil || !strings.Contains(hist, `"DomainRemoved"`) || !strings.Contains(hist, `"actor":"operator"`) {
		t.Fatalf("history of the released domain: %v\n%s", err, hist)
	}

	s.Sender("acme.test") // verified
	if _, _, err := run(t, append([]string{"domains", "release", "acme.test"}, flags...)...); err == nil || !strings.Contains(err.Error(), "verified") {
		t.Fatalf("releasing a verified domain's name: %v", err)
	}
	if _, _, err := run(t, append([]string{"domains", "release", "nobody-holds.test"}, flags...)...); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("releasing a name nobody holds: %v", err)
	}
}
