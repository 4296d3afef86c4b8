package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/credential"
)

var operatorMeta = commands.Meta{Actor: "operator"}

// tokenList is GET /api/auth/tokens as a list of objects.
func tokenList(t *testing.T, s *apptest.Server, credential string) []map[string]any {
	t.Helper()
	r := s.Do("GET", "/api/auth/tokens", credential, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("list tokens: %d %s", r.Status, r.Body)
	}
	var out []map[string]any
	for _, item := range r.JSON(t)["data"].([]any) {
		out = append(out, item.(map[string]any))
	}
	return out
}

func tokenByID(t *testing.T, list []map[string]any, id string) map[string]any {
	t.Helper()
	for _, item := range list {
		if item["id"] == id {
			return item
		}
	}
	t.Fatalf("token %s not listed: %v", id, list)
	return nil
}

func TestManagementTokens(t *testing.T) {
	s := apptest.Start(t)
	ctx := context.Background()
	acct, admin := s.Account("Acme")
	second, err := s.Commands.IssueExpiringToken(ctx, acct, account.RoleAdmin, 24*time.Hour, operatorMeta)
	if err != nil {
		t.Fatal(err)
	}
	member, err := s.Commands.IssueToken(ctx, acct, account.RoleMember, operatorMeta)
	if err != nil {
		t.Fatal(err)
	}
	_, otherAdmin := s.Account("Other")

	if r := s.Do("GET", "/api/auth/api-keys", second.Token, nil); r.Status != http.StatusOK {
		t.Fatalf("second admin token: %d %s", r.Status, r.Body)
	}

	// The list shows every token of the account, never a secret or its hash.
	r := s.Do("GET", "/api/auth/tokens", admin, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	for _, secret := range []string{admin, second.Token, member} {
		_, random, _ := strings.Cut(secret, "_")
		if strings.Contains(string(r.Body), random) || strings.Contains(string(r.Body), credential.Hash(secret)) {
			t.Fatalf("token list reveals a secret or its hash: %s", r.Body)
		}
	}
	list := tokenList(t, s, admin)
	if len(list) != 3 {
		t.Fatalf("listed %d tokens, want 3: %v", len(list), list)
	}
	for _, item := range list {
		var keys []string
		for k := range item {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if fmt.Sprint(keys) != "[created_at expires_at id is_active last_used revoked_at role]" {
			t.Fatalf("token fields %v", keys)
		}
		if !timestamp.MatchString(item["created_at"].(string)) || item["is_active"] != true || item["revoked_at"] != nil {
			t.Fatalf("listed token %v", item)
		}
	}
	listed := tokenByID(t, list, second.ID)
	if listed["role"] != "org:admin" || listed["expires_at"] != apitime.Format(second.ExpiresAt) {
		t.Fatalf("expiring token listed as %v (expires %s)", listed, apitime.Format(second.ExpiresAt))
	}
	var adminID string
	for _, item := range list {
		switch {
		case item["id"] == second.ID:
		case item["role"] == "org:member":
			if item["expires_at"] != nil {
				t.Fatalf("a token issued without expiry lists expires_at %v", item["expires_at"])
			}
		default:
			adminID = item["id"].(string)
		}
	}
	// last_used is written in the background once the token is used.
	deadline := time.Now().Add(60 * time.Second)
	for tokenByID(t, tokenList(t, s, admin), second.ID)["last_used"] == nil {
		if time.Now().After(deadline) {
			t.Fatal("last_used never set for a used token")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if lu := tokenByID(t, tokenList(t, s, admin), second.ID)["last_used"].(string); !timestamp.MatchString(lu) {
		t.Fatalf("last_used %q", lu)
	}

	// Members may neither list nor revoke tokens.
	wantProblem(t, s.Do("GET", "/api/auth/tokens", member, nil), 403, "role_required")
	wantProblem(t, s.Do("DELETE", "/api/auth/tokens/"+second.ID, member, nil), 403, "role_required")
	// Another account's token, and ids that are no token, are not found.
	wantProblem(t, s.Do("DELETE", "/api/auth/tokens/"+second.ID, otherAdmin, nil), 404, "not_found")
	wantProblem(t, s.Do("DELETE", "/api/auth/tokens/"+uuid.NewString(), admin, nil), 404, "not_found")
	wantProblem(t, s.Do("DELETE", "/api/auth/tokens/not-an-id", admin, nil), 404, "not_found")
	if other := tokenList(t, s, otherAdmin); len(other) != 1 || other[0]["id"] == second.ID {
		t.Fatalf("another account lists %v", other)
	}

	// Revoked: 204, and the very next request with it is refused.
	r = s.Do("DELETE", "/api/auth/tokens/"+second.ID, admin, nil)
	if r.Status != http.StatusNoContent || len(r.Body) != 0 {
		t.Fatalf("revoke: %d %q", r.Status, r.Body)
	}
	wantProblem(t, s.Do("GET", "/api/auth/api-keys", second.Token, nil), 401, "unauthorized")
	// Again: still 204, still revoked.
	if r := s.Do("DELETE", "/api/auth/tokens/"+second.ID, admin, nil); r.Status != http.StatusNoContent {
		t.Fatalf("repeated revoke: %d %s", r.Status, r.Body)
	}
	wantProblem(t, s.Do("GET", "/api/auth/api-keys", second.Token, nil), 401, "unauthorized")
	revoked := tokenByID(t, tokenList(t, s, admin), second.ID)
	if revoked["is_active"] != false || revoked["revoked_at"] == nil || !timestamp.MatchString(revoked["revoked_at"].(string)) {
		t.Fatalf("revoked token listed as %v", revoked)
	}

	// A token may revoke itself; the request after that is refused. The
	// member token is untouched.
	if r := s.Do("DELETE", "/api/auth/tokens/"+adminID, admin, nil); r.Status != http.StatusNoContent {
		t.Fatalf("self-revocation: %d %s", r.Status, r.Body)
	}
	wantProblem(t, s.Do("GET", "/api/auth/tokens", admin, nil), 401, "unauthorized")
	if r := s.Do("GET", "/api/auth/api-keys", member, nil); r.Status != http.StatusOK {
		t.Fatalf("member after the admins' revocation: %d %s", r.Status, r.Body)
	}
}

// TestTokenRevocationOnAnotherInstance revokes on one instance and expires
// a token by the clock; a second instance on the same database refuses
// both on their next request.
func TestTokenRevocationOnAnotherInstance(t *testing.T) {
	s := apptest.Start(t)
	cfg := apptest.Config(t, s.DatabaseURL)
	cfg.Roles = []string{"api"}
	other := apptest.StartWithClock(t, cfg, s.Clock)
	ctx := context.Background()

	acct, admin := s.Account("Acme")
	victim, err := s.Commands.IssueExpiringToken(ctx, acct, account.RoleAdmin, 0, operatorMeta)
	if err != nil {
		t.Fatal(err)
	}
	short, err := s.Commands.IssueExpiringToken(ctx, acct, account.RoleMember, time.Hour, operatorMeta)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{admin, victim.Token, short.Token} {
		if r := other.Do("GET", "/api/auth/api-keys", tok, nil); r.Status != http.StatusOK {
			t.Fatalf("token on the second instance: %d %s", r.Status, r.Body)
		}
	}

	if r := s.Do("DELETE", "/api/auth/tokens/"+victim.ID, admin, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	wantProblem(t, other.Do("GET", "/api/auth/api-keys", victim.Token, nil), 401, "unauthorized")

	// An hour later the short-lived token is refused everywhere.
	if r := other.Do("GET", "/api/auth/api-keys", short.Token, nil); r.Status != http.StatusOK {
		t.Fatalf("before expiry: %d %s", r.Status, r.Body)
	}
	s.Clock.Advance(time.Hour + time.Second)
	wantProblem(t, other.Do("GET", "/api/auth/api-keys", short.Token, nil), 401, "unauthorized")
	wantProblem(t, s.Do("GET", "/api/auth/api-keys", short.Token, nil), 401, "unauthorized")
	if r := other.Do("GET", "/api/auth/api-keys", admin, nil); r.Status != http.StatusOK {
		t.Fatalf("unexpiring token after the hour: %d %s", r.Status, r.Body)
	}
	if item := tokenByID(t, tokenList(t, other, admin), short.ID); item["is_active"] != false || item["revoked_at"] != nil {
		t.Fatalf("expired token listed as %v", item)
	}
}

// TestUnconfirmedRevocation: with no projections running, a revocation
// cannot be seen to take effect, so it answers 503 rather than 204; once
// projections run, repeating it answers 204 and the credential is refused.
func TestUnconfirmedRevocation(t *testing.T) {
	first := apptest.Start(t)
	ctx := context.Background()
	acct, admin := first.Account("Acme")
	r := first.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "k"})
	if r.Status != http.StatusCreated {
		t.Fatalf("create key: %d %s", r.Status, r.Body)
	}
	key, keyID := r.JSON(t)["key"].(string), r.JSON(t)["id"].(string)
	tok, err := first.Commands.IssueExpiringToken(ctx, acct, account.RoleMember, 0, operatorMeta)
	if err != nil {
		t.Fatal(err)
	}
	first.Stop()

	cfg := apptest.Config(t, first.DatabaseURL)
	cfg.Roles = []string{"api"}
	cfg.ConsistencyTimeout = 300 * time.Millisecond
	api := apptest.StartWith(t, cfg)

	for _, path := range []string{"/api/auth/api-keys/" + keyID, "/api/auth/tokens/" + tok.ID} {
		r := api.Do("DELETE", path, admin, nil)
		wantProblem(t, r, http.StatusServiceUnavailable, "not_yet_visible")
		if r.Header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After: %v", r.Header)
		}
	}
	// As the answer said, neither revocation is in effect yet.
	if r := api.Do("GET", "/v1/emails", key, nil); r.Status != http.StatusOK {
		t.Fatalf("key before the revocation is visible: %d %s", r.Status, r.Body)
	}

	pcfg := apptest.Config(t, first.DatabaseURL)
	pcfg.Roles = []string{"projections"}
	apptest.StartWith(t, pcfg)

	// Retried as a client would on 503, each revocation ends in 204, after
	// which the credential is refused at once.
	revoke := func(path string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := api.Do("DELETE", path, admin, nil)
			if r.Status == http.StatusNoContent {
				return
			}
			wantProblem(t, r, http.StatusServiceUnavailable, "not_yet_visible")
			if time.Now().After(deadline) {
				t.Fatalf("DELETE %s still 503", path)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	revoke("/api/auth/api-keys/" + keyID)
	wantProblem(t, api.Do("GET", "/v1/emails", key, nil), 401, "unauthorized")
	revoke("/api/auth/tokens/" + tok.ID)
	wantProblem(t, api.Do("GET", "/api/auth/api-keys", tok.Token, nil), 401, "unauthorized")
}

// With no projections running, the writes that must be in effect when they
// answer (a domain's removal, an endpoint's pause, deletion and secret)
// answer 503 rather than claim it; a new endpoint answers 201 with its
// secret all the same, as nothing about it depends on the read side.
func TestUnconfirmedEndpointAndDomainChanges(t *testing.T) {
	local := func(c *config.Config) { c.EgressAllowCIDRs, c.WebhookAllowHTTP = "127.0.0.0/8", true }
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer rcv.Close()
	first := apptest.Start(t, local)
	_, admin, key := first.Sender("acme.test")
	var domainID string
	for _, d := range first.Do("GET", "/api/domains", admin, nil).JSON(t)["data"].([]any) {
		domainID = d.(map[string]any)["id"].(string)
	}
	r := first.Do("POST", "/v1/webhooks", key, map[string]any{"url": rcv.URL + "/a"})
	if r.Status != http.StatusCreated {
		t.Fatalf("create endpoint: %d %s", r.Status, r.Body)
	}
	endpoint := r.JSON(t)["id"].(string)
	first.Stop()

	cfg := apptest.Config(t, first.DatabaseURL)
	cfg.Roles = []string{"api"}
	cfg.ConsistencyTimeout = 300 * time.Millisecond
	local(&cfg)
	api := apptest.StartWith(t, cfg)

	r = api.Do("POST", "/v1/webhooks", key, map[string]any{"url": rcv.URL + "/b", "description": "lagging"})
	if r.Status != http.StatusCreated || !strings.HasPrefix(fmt.Sprint(r.JSON(t)["secret"]), "whsec_") || r.JSON(t)["description"] != "lagging" {
		t.Fatalf("create while the read side lags: %d %s", r.Status, r.Body)
	}
	for _, req := range []struct{ method, path, cred string }{
		{"PATCH", "/v1/webhooks/" + endpoint, key},
		{"POST", "/v1/webhooks/" + endpoint + "/rotate-secret", key},
		{"DELETE", "/v1/webhooks/" + endpoint, key},
		{"DELETE", "/api/domains/" + domainID, admin},
	} {
		var body any
		if req.method == "PATCH" {
			body = map[string]any{"is_active": false}
		}
		r := api.Do(req.method, req.path, req.cred, body)
		wantProblem(t, r, http.StatusServiceUnavailable, "not_yet_visible")
		if strings.Contains(string(r.Body), "whsec_") {
			t.Fatalf("%s %s shows a secret not yet in effect: %s", req.method, req.path, r.Body)
		}
	}

	// Repeated while still not in effect, a removal says so again rather
	// than that the thing is gone.
	wantProblem(t, api.Do("DELETE", "/api/domains/"+domainID, admin, nil), http.StatusServiceUnavailable, "not_yet_visible")
	wantProblem(t, api.Do("DELETE", "/v1/webhooks/"+endpoint, key, nil), http.StatusServiceUnavailable, "not_yet_visible")

	pcfg := apptest.Config(t, first.DatabaseURL)
	pcfg.Roles = []string{"projections"}
	apptest.StartWith(t, pcfg)
	// Each projector catches up on its own: wait for both removals.
	deadline := time.Now().Add(20 * time.Second)
	for api.Do("GET", "/api/domains/"+domainID, admin, nil).Status != http.StatusNotFound ||
		api.Do("GET", "/v1/webhooks/"+endpoint, key, nil).Status != http.StatusNotFound {
		if time.Now().After(deadline) {
			t.Fatal("the removed domain or endpoint is still listed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantProblem(t, api.Do("POST", "/v1/emails/send", key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"}),
		http.StatusForbidden, "domain_not_verified")
	wantProblem(t, api.Do("GET", "/v1/webhooks/"+endpoint, key, nil), http.StatusNotFound, "not_found")
	// Once in effect, a repeat finds them gone.
	wantProblem(t, api.Do("DELETE", "/api/domains/"+domainID, admin, nil), http.StatusNotFound, "not_found")
	wantProblem(t, api.Do("DELETE", "/v1/webhooks/"+endpoint, key, nil), http.StatusNotFound, "not_found")
}

// runWorkers runs s's process managers until the returned stop is called
// (or the test ends).
func runWorkers(t *testing.T, s *apptest.Server) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.RunWorkers(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("workers: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestSuspendedAccountIsStopped: a suspended account may read but not write
// on /api; its queued email and its pending webhook wait, without spending
// retries, while another account's mail flows; reinstated, the email is sent
// once and the webhook delivered.
func TestSuspendedAccountIsStopped(t *testing.T) {
	hooksA := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	hooksB := newReceiver(t, always(http.StatusNoContent))
	s := apptest.Start(t, func(c *config.Config) {
		c.Roles = []string{"api", "projections"} // workers run under the test's control
		c.EgressAllowCIDRs = "127.0.0.0/8,::1/128"
		c.WebhookAllowHTTP = true
	})
	stopWorkers := runWorkers(t, s)
	ctx := context.Background()
	acctA, adminA, keyA := s.Sender("a.test")
	_, _, keyB := s.Sender("b.test")
	endpoint := func(key, url string) string {
		t.Helper()
		r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": url, "event_types": []string{"email.delivered"}})
		if r.Status != http.StatusCreated {
			t.Fatalf("create endpoint: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	epA := endpoint(keyA, hooksA.URL)
	endpoint(keyB, hooksB.URL)
	send := func(key, from string) string {
		t.Helper()
		r := s.Do("POST", "/v1/emails/send", key, map[string]any{"from": from, "to": "ann@example.org", "subject": "Hi", "text": "Hi"})
		if r.Status != http.StatusAccepted {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	waitDelivered := func(key, id string) map[string]any {
		t.Helper()
		w := &sendWorld{Server: s, key: key}
		return w.waitFor(t, id, status("delivered"))
	}

	// Account A's first email is delivered; its webhook's first attempt
	// fails and waits for a retry.
	waitDelivered(keyA, send(keyA, "hello@a.test"))
	hooksA.waitFor(t, 1)
	stopWorkers() // waits for the attempt to be recorded
	held := send(keyA, "hello@a.test")

	if err := s.Commands.SuspendAccount(ctx, acctA, operatorMeta); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, s.Do("POST", "/api/auth/api-keys", adminA, map[string]any{"name": "k"}), 403, "account_suspended")
	wantProblem(t, s.Do("POST", "/api/domains", adminA, map[string]any{"domain": "other.test"}), 403, "account_suspended")
	wantProblem(t, s.Do("DELETE", "/api/auth/tokens/"+uuid.NewString(), adminA, nil), 403, "account_suspended")
	for _, path := range []string{"/api/auth/api-keys", "/api/domains", "/api/auth/tokens"} {
		if r := s.Do("GET", path, adminA, nil); r.Status != http.StatusOK {
			t.Fatalf("suspended account reads %s: %d %s", path, r.Status, r.Body)
		}
	}
	wantProblem(t, s.Do("GET", "/v1/emails", keyA, nil), 403, "account_suspended")

	// The webhook's retry falls due while the account is suspended.
	s.Clock.Advance(2 * time.Minute)
	runWorkers(t, s)

	// The queued email is held: recorded in its history, never sent.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE stream_id = $1 AND event_type = 'EmailHeld'", email.Stream(held)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("email %s never held (%d EmailHeld)", held, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Another account's mail and webhooks flow meanwhile.
	for range 2 {
		waitDelivered(keyB, send(keyB, "hello@b.test"))
	}
	hooksB.waitFor(t, 2)
	if _, err := os.Stat(filepath.Join(s.Config.SandboxOutbox, held+".eml")); !os.IsNotExist(err) {
		t.Fatalf("held email reached the outbox: %v", err)
	}
	var st string
	if err := s.Pool.QueryRow(ctx, "SELECT status FROM emails WHERE id = $1", held).Scan(&st); err != nil || st != "queued" {
		t.Fatalf("held email shows %q (%v), want queued", st, err)
	}
	if n := len(hooksA.requests()); n != 1 {
		t.Fatalf("suspended account's webhook attempted while suspended: %d requests", n)
	}
	var attempts int
	if err := s.Pool.QueryRow(ctx, "SELECT attempts FROM webhook_deliveries WHERE endpoint_id = $1", epA).Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("held delivery attempts %d (%v), want 1", attempts, err)
	}

	// Reinstated: the email is sent once, the webhook delivered on its
	// second attempt, and writes are allowed again.
	if err := s.Commands.ReinstateAccount(ctx, acctA, operatorMeta); err != nil {
		t.Fatal(err)
	}
	e := waitDelivered(keyA, held)
	sent := 0
	for _, typ := range timelineOf(e) {
		if typ == "sent" {
			sent++
		}
	}
	if sent != 1 {
		t.Fatalf("timeline %v, want one sent", timelineOf(e))
	}
	files, err := filepath.Glob(filepath.Join(s.Config.SandboxOutbox, held+"*"))
	if err != nil || len(files) != 1 {
		t.Fatalf("outbox files for the released email: %v %v", files, err)
	}
	hooksA.waitFor(t, 3) // the retry and the released email's delivery
	w := &hookWorld{&sendWorld{Server: s, key: keyA}}
	var first map[string]any
	for _, d := range w.deliveries(t, epA, "?limit=100") {
		if d["email_id"] != held {
			first = d
		}
	}
	if first == nil {
		t.Fatalf("no delivery of the first email: %v", w.deliveries(t, epA, "?limit=100"))
	}
	if d := w.waitDelivery(t, epA, first["id"].(string), "delivered"); d["attempts"] != 2.0 {
		t.Fatalf("held delivery after reinstatement: %v", d)
	}
	if r := s.Do("POST", "/api/auth/api-keys", adminA, map[string]any{"name": "k"}); r.Status != http.StatusCreated {
		t.Fatalf("write after reinstatement: %d %s", r.Status, r.Body)
	}
}

func TestAPIKeyCap(t *testing.T) {
	s := apptest.Start(t)
	acct, admin := s.Account("Acme")
	for i := range apikey.MaxActive - 1 {
		if _, err := s.Commands.CreateAPIKey(context.Background(), acct, fmt.Sprint("k", i), nil, operatorMeta); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "last"})
	if r.Status != http.StatusCreated {
		t.Fatalf("key %d: %d %s", apikey.MaxActive, r.Status, r.Body)
	}
	last := r.JSON(t)["id"].(string)
	wantProblem(t, s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "one too many"}), 422, "limit_exceeded")
	// Another account has its own allowance; a revoked key frees a place.
	_, other := s.Account("Other")
	if r := s.Do("POST", "/api/auth/api-keys", other, map[string]any{"name": "k"}); r.Status != http.StatusCreated {
		t.Fatalf("other account: %d %s", r.Status, r.Body)
	}
	if r := s.Do("DELETE", "/api/auth/api-keys/"+last, admin, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if r := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "again"}); r.Status != http.StatusCreated {
		t.Fatalf("after a revocation: %d %s", r.Status, r.Body)
	}
}

// TestHoldAfterReinstatementIsReleased: a hold recorded after the release
// process had handled the reinstatement (the pipeline read the status just
// before it changed) is released by its own event, and the email is sent
// once.
func TestHoldAfterReinstatementIsReleased(t *testing.T) {
	s := apptest.Start(t, func(c *config.Config) { c.Roles = []string{"api", "projections"} })
	acct, _, key := s.Sender("acme.test")
	w := &sendWorld{Server: s, key: key}
	ctx := context.Background()
	stop := runWorkers(t, s)
	if err := s.Commands.SuspendAccount(ctx, acct, operatorMeta); err != nil {
		t.Fatal(err)
	}
	if err := s.Commands.ReinstateAccount(ctx, acct, operatorMeta); err != nil {
		t.Fatal(err)
	}
	// Wait until the release process has passed the reinstatement.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var passed bool
		err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM processmanager_checkpoints c, events e
			WHERE c.name = 'email-release' AND e.stream_id = $1 AND e.event_type = 'AccountReinstated'
			AND (c.commit_position, c.prepare_position) >= (e.transaction_id::text::bigint, e.seq))`, account.Stream(acct)).Scan(&passed)
		if err != nil {
			t.Fatal(err)
		}
		if passed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the release process never passed the reinstatement")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()

	// The pipeline's stale read: an email queued now is held although the
	// account is active again.
	id := w.send(t, map[string]any{"from": "hello@acme.test", "to": "ann@example.org", "subject": "Hi", "text": "Hi"})["id"].(string)
	if err := s.Commands.HoldEmail(ctx, id, commands.Meta{Actor: "system:email-pipeline"}); err != nil {
		t.Fatal(err)
	}
	runWorkers(t, s)
	e := w.waitFor(t, id, status("delivered"))
	if got := fmt.Sprint(timelineOf(e)); got != "[sent delivered]" {
		t.Fatalf("timeline %s", got)
	}
	var released int
	if err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE stream_id = $1 AND event_type = 'EmailReleased'", email.Stream(id)).Scan(&released); err != nil || released != 1 {
		t.Fatalf("EmailReleased recorded %d times (%v)", released, err)
	}
}
