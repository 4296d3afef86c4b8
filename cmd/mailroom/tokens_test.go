package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/pgtest"
)

func TestTokenCommands(t *testing.T) {
	db := pgtest.NewURL(t)
	flags := []string{"--database-url", db, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey}
	out, _, err := run(t, append([]string{"accounts", "create", "--name", "Acme", "--json"}, flags...)...)
	var acct struct {
		AccountID string `json:"account_id"`
		Token     string `json:"token"`
	}
	if err != nil || json.Unmarshal([]byte(out), &acct) != nil {
		t.Fatalf("accounts create: %q %v", out, err)
	}

	type issued struct {
		Token     string  `json:"token"`
		ID        string  `json:"id"`
		ExpiresAt *string `json:"expires_at"`
	}
	create := func(extra ...string) issued {
		t.Helper()
		out, _, err := run(t, append(append([]string{"tokens", "create", "--account", acct.AccountID, "--json"}, extra...), flags...)...)
		var tok issued
		if err != nil || json.Unmarshal([]byte(out), &tok) != nil || !strings.HasPrefix(tok.Token, "mrt_") || uuid.Validate(tok.ID) != nil {
			t.Fatalf("tokens create %v: %q %v", extra, out, err)
		}
		return tok
	}
	forever := create("--role", "org:admin")
	if forever.ExpiresAt != nil {
		t.Fatalf("a token without --expires-in expires at %s", *forever.ExpiresAt)
	}
	before := time.Now()
	hourly := create("--expires-in", "1h")
	if hourly.ExpiresAt == nil {
		t.Fatal("--expires-in 1h printed no expires_at")
	}
	at, err := time.Parse("2006-01-02T15:04:05.000Z", *hourly.ExpiresAt)
	if err != nil || at.Before(before.Add(time.Hour-time.Second)) || at.After(time.Now().Add(time.Hour+time.Second)) {
		t.Fatalf("expires_at %s (%v), want an hour from now", *hourly.ExpiresAt, err)
	}
	if _, _, err := run(t, append([]string{"tokens", "create", "--account", acct.AccountID, "--expires-in", "-1h"}, flags...)...); err == nil || !strings.Contains(err.Error(), "--expires-in must not be negative") {
		t.Fatalf("a past expiry: %v", err)
	}

	s := apptest.StartWith(t, apptest.Config(t, db))
	for _, tok := range []string{forever.Token, hourly.Token} {
		if r := s.Do("GET", "/api/auth/api-keys", tok, nil); r.Status != 200 {
			t.Fatalf("token from the CLI: %d %s", r.Status, r.Body)
		}
	}

	out, _, err = run(t, append([]string{"tokens", "revoke", forever.ID, "--json"}, flags...)...)
	var revoked map[string]string
	if err != nil || json.Unmarshal([]byte(out), &revoked) != nil ||
		revoked["id"] != forever.ID || revoked["account_id"] != acct.AccountID || revoked["status"] != "revoked" {
		t.Fatalf("tokens revoke --json: %q %v", out, err)
	}
	if r := s.Do("GET", "/api/auth/api-keys", forever.Token, nil); r.Status != 401 {
		t.Fatalf("revoked token: %d %s", r.Status, r.Body)
	}
	// Revoking again succeeds and changes nothing; an unknown id is named.
	if out, _, err := run(t, append([]string{"tokens", "revoke", forever.ID}, flags...)...); err != nil || !strings.Contains(out, forever.ID+" revoked") {
		t.Fatalf("revoke again: %q %v", out, err)
	}
	missing := uuid.NewString()
	if _, _, err := run(t, append([]string{"tokens", "revoke", missing}, flags...)...); err == nil || !strings.Contains(err.Error(), "token "+missing+" not found") {
		t.Fatalf("revoke unknown: %v", err)
	}

	// The expiring token stops working once its hour has passed.
	s.Clock.Advance(time.Hour + time.Second)
	if r := s.Do("GET", "/api/auth/api-keys", hourly.Token, nil); r.Status != 401 {
		t.Fatalf("expired token: %d %s", r.Status, r.Body)
	}
	if r := s.Do("GET", "/api/auth/api-keys", acct.Token, nil); r.Status != 200 {
		t.Fatalf("first admin token: %d %s", r.Status, r.Body)
	}
}

// A suspended account cannot revoke its own keys; an operator can, so a
// leaked key is dead before the account is reinstated.
func TestAnOperatorRevokesAnAPIKeyOfASuspendedAccount(t *testing.T) {
	db := pgtest.NewURL(t)
	flags := []string{"--database-url", db, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey}
	s := apptest.StartWith(t, apptest.Config(t, db))
	acct, admin := s.Account("Acme")
	created := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "leaked"}).JSON(t)
	key, keyID := created["key"].(string), created["id"].(string)
	if r := s.Do("GET", "/v1/emails", key, nil); r.Status != 200 {
		t.Fatalf("new key: %d %s", r.Status, r.Body)
	}
	if _, _, err := run(t, append([]string{"accounts", "suspend", acct}, flags...)...); err != nil {
		t.Fatal(err)
	}
	if r := s.Do("DELETE", "/api/auth/api-keys/"+keyID, admin, nil); r.Status != 403 {
		t.Fatalf("revocation by the suspended account: %d %s", r.Status, r.Body)
	}

	out, _, err := run(t, append([]string{"api-keys", "revoke", keyID, "--json"}, flags...)...)
	var revoked map[string]string
	if err != nil || json.Unmarshal([]byte(out), &revoked) != nil ||
		revoked["id"] != keyID || revoked["account_id"] != acct || revoked["status"] != "revoked" {
		t.Fatalf("api-keys revoke --json: %q %v", out, err)
	}
	if _, _, err := run(t, append([]string{"accounts", "reinstate", acct}, flags...)...); err != nil {
		t.Fatal(err)
	}
	if r := s.Do("GET", "/v1/emails", key, nil); r.Status != 401 {
		t.Fatalf("revoked key after reinstatement: %d %s", r.Status, r.Body)
	}
	// Again: success, nothing changes. An unknown id, or a token's, is named.
	if out, _, err := run(t, append([]string{"api-keys", "revoke", keyID}, flags...)...); err != nil || out != "API key "+keyID+" revoked\n" {
		t.Fatalf("revoke again: %q %v", out, err)
	}
	tokenID := s.Do("GET", "/api/auth/tokens", admin, nil).JSON(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	for _, id := range []string{uuid.NewString(), tokenID, "not-an-id"} {
		if out, _, err := run(t, append([]string{"api-keys", "revoke", id}, flags...)...); err == nil || out != "" || err.Error() != "API key "+id+" not found" {
			t.Fatalf("revoke %s: %q %v", id, out, err)
		}
	}
	if r := s.Do("GET", "/api/auth/tokens", admin, nil); r.Status != 200 {
		t.Fatalf("the token whose id was tried: %d %s", r.Status, r.Body)
	}
	// On a pool of one connection a command would wait on itself for
	// ever: it is refused.
	one := db + "&pool_max_conns=1"
	if !strings.Contains(db, "?") {
		one = db + "?pool_max_conns=1"
	}
	if _, _, err := run(t, "api-keys", "revoke", keyID, "--database-url", one, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey); err == nil ||
		!strings.Contains(err.Error(), "operator commands need at least 2") {
		t.Fatalf("revoke on a pool of one: %v", err)
	}
}
