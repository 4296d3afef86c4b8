package app_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/readapi"
)

var timestamp = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

// wantProblem checks an error answer: status, problem+json, a code and the
// request id.
func wantProblem(t *testing.T, r apptest.Response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	p := r.JSON(t)
	if code != "" && p["code"] != code {
		t.Fatalf("code %v, want %s: %s", p["code"], code, r.Body)
	}
	if p["code"] == nil || p["code"] == "" {
		t.Fatalf("problem without code: %s", r.Body)
	}
	if p["request_id"] == "" || p["request_id"] != r.Header.Get("X-Request-Id") {
		t.Fatalf("request_id %v does not match X-Request-Id %q", p["request_id"], r.Header.Get("X-Request-Id"))
	}
	if int(p["status"].(float64)) != status {
		t.Fatalf("problem status %v, want %d", p["status"], status)
	}
}

func TestAPIKeysEndToEnd(t *testing.T) {
	s := apptest.Start(t)
	_, admin := s.Account("Acme")

	// Create a read-only key.
	r := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "reader", "permissions": []string{"emails:read"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("create key: %d %s", r.Status, r.Body)
	}
	created := r.JSON(t)
	key, _ := created["key"].(string)
	if !regexp.MustCompile(`^mr_[0-9A-Za-z]{32,}$`).MatchString(key) {
		t.Fatalf("key %q does not look like mr_<32+ base62>", key)
	}
	if created["key_preview"] != key[:9]+"..." {
		t.Fatalf("key_preview %v, want %s...", created["key_preview"], key[:9])
	}
	if fmt.Sprint(created["permissions"]) != "[emails:read]" || created["is_active"] != true || created["name"] != "reader" {
		t.Fatalf("created key: %s", r.Body)
	}
	if !timestamp.MatchString(created["created_at"].(string)) {
		t.Fatalf("created_at %v", created["created_at"])
	}
	if _, ok := created["last_used"]; ok {
		t.Fatal("creation response must not carry last_used")
	}
	keyID := created["id"].(string)

	// Default permissions are both.
	r = s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "default"})
	if r.Status != http.StatusCreated || fmt.Sprint(r.JSON(t)["permissions"]) != "[emails:send emails:read]" {
		t.Fatalf("default permissions: %d %s", r.Status, r.Body)
	}
	sender := r.JSON(t)["key"].(string)
	r = s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "send only", "permissions": []string{"emails:send"}})
	sendOnly := r.JSON(t)["key"].(string)

	// The list never shows a full key, and shows last_used.
	r = s.Do("GET", "/v1/emails", key, nil) // uses the key once
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/emails: %d %s", r.Status, r.Body)
	}
	list := s.Do("GET", "/api/auth/api-keys", admin, nil)
	if list.Status != http.StatusOK {
		t.Fatalf("list: %d %s", list.Status, list.Body)
	}
	for _, secret := range []string{key, sender, sendOnly} {
		if strings.Contains(string(list.Body), secret) {
			t.Fatalf("list contains a full key: %s", list.Body)
		}
	}
	data := list.JSON(t)["data"].([]any)
	if len(data) != 3 {
		t.Fatalf("list has %d keys, want 3", len(data))
	}
	var listed map[string]any
	for _, k := range data {
		if k.(map[string]any)["id"] == keyID {
			listed = k.(map[string]any)
		}
	}
	if listed == nil || listed["key_preview"] != created["key_preview"] {
		t.Fatalf("created key missing from list: %s", list.Body)
	}
	if _, ok := listed["key"]; ok {
		t.Fatal("list item carries key")
	}
	if lu, ok := listed["last_used"].(string); !ok || !timestamp.MatchString(lu) {
		// last_used is written asynchronously.
		for deadline := time.Now().Add(60 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for _, k := range s.Do("GET", "/api/auth/api-keys", admin, nil).JSON(t)["data"].([]any) {
				if k.(map[string]any)["id"] == keyID {
					lu, ok = k.(map[string]any)["last_used"].(string)
				}
			}
		}
		if !ok || !timestamp.MatchString(lu) {
			t.Fatalf("last_used after use = %v", listed["last_used"])
		}
	}

	// GET /v1/emails answers the empty shape.
	r = s.Do("GET", "/v1/emails", key, nil)
	body := r.JSON(t)
	if fmt.Sprint(body["data"]) != "[]" {
		t.Fatalf("data = %v", body["data"])
	}
	pg := body["pagination"].(map[string]any)
	if pg["total"] != 0.0 || pg["total_pages"] != 0.0 || pg["page"] != 1.0 || pg["per_page"] != 20.0 {
		t.Fatalf("pagination = %v", pg)
	}
	if got := s.Do("GET", "/v1/emails?per_page=500", key, nil).JSON(t)["pagination"].(map[string]any)["per_page"]; got != 100.0 {
		t.Fatalf("per_page=500 clamped to %v, want 100", got)
	}
	for _, q := range []string{"page=0", "per_page=-1", "page=abc", "date_from=yesterday", "date_from=0001-01-01", "date_to=1969-12-31T23:59:59Z"} {
		wantProblem(t, s.Do("GET", "/v1/emails?"+q, key, nil), 422, "validation_failed")
	}

	// Authentication and authorisation on /v1.
	unauthenticated := s.Do("GET", "/v1/emails", "", nil)
	wantProblem(t, unauthenticated, 401, "")
	if got := unauthenticated.Header.Get("WWW-Authenticate"); got != `Bearer realm="mailroom"` {
		t.Errorf("401 WWW-Authenticate = %q", got)
	}
	wantProblem(t, s.Do("GET", "/v1/emails", "not-a-key", nil), 401, "")
	wantProblem(t, s.Do("GET", "/v1/emails", "mr_"+strings.Repeat("x", 40), nil), 401, "")
	wantProblem(t, s.Do("GET", "/v1/emails", admin, nil), 401, "")
	wantProblem(t, s.Do("GET", "/v1/emails", sendOnly, nil), 403, "permission_denied")
	// Two Authorization headers are refused, whichever comes first: a proxy
	// reading the other one would see another caller.
	for _, pair := range [][]string{{"Bearer " + key, "Bearer mr_x"}, {"Bearer mr_x", "Bearer " + key}, {"Bearer " + key, "Bearer " + key}} {
		wantProblem(t, s.DoHeader("GET", "/v1/emails", "", http.Header{"Authorization": pair}, nil), 401, "")
	}
	// API keys are refused on /api.
	wantProblem(t, s.Do("GET", "/api/auth/api-keys", sender, nil), 401, "")

	// Another account cannot see or revoke the key.
	_, otherAdmin := s.Account("Other")
	if n := len(s.Do("GET", "/api/auth/api-keys", otherAdmin, nil).JSON(t)["data"].([]any)); n != 0 {
		t.Fatalf("other account sees %d keys", n)
	}
	wantProblem(t, s.Do("DELETE", "/api/auth/api-keys/"+keyID, otherAdmin, nil), 404, "not_found")
	wantProblem(t, s.Do("DELETE", "/api/auth/api-keys/not-an-id", admin, nil), 404, "not_found")

	// Revocation is immediate.
	r = s.Do("DELETE", "/api/auth/api-keys/"+keyID, admin, nil)
	if r.Status != http.StatusNoContent || len(r.Body) != 0 {
		t.Fatalf("delete: %d %q", r.Status, r.Body)
	}
	wantProblem(t, s.Do("GET", "/v1/emails", key, nil), 401, "")
	for _, k := range s.Do("GET", "/api/auth/api-keys", admin, nil).JSON(t)["data"].([]any) {
		if k := k.(map[string]any); k["id"] == keyID && k["is_active"] != false {
			t.Fatalf("revoked key listed as active: %v", k)
		}
	}

	// Validation and malformed bodies.
	wantProblem(t, s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"permissions": []string{"emails:read"}}), 422, "validation_failed")
	wantProblem(t, s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "x", "permissions": []string{"emails:delete"}}), 422, "validation_failed")
	wantProblem(t, s.Do("POST", "/api/auth/api-keys", admin, `{"name": `), 400, "")
	wantProblem(t, s.Do("POST", "/api/auth/api-keys", admin, `{"name": 7}`), 400, "")
	wantProblem(t, s.Do("GET", "/api/nothing-here", admin, nil), 404, "")

	// Members may manage keys too.
	acctID := func() string {
		var id string
		s.Pool.QueryRow(context.Background(), "SELECT id FROM accounts WHERE name = 'Acme'").Scan(&id)
		return id
	}()
	member, err := s.Commands.IssueToken(context.Background(), acctID, account.RoleMember, commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Do("GET", "/api/auth/api-keys", member, nil); r.Status != 200 {
		t.Fatalf("member list: %d %s", r.Status, r.Body)
	}

	// A suspended account gets 403 on /v1, and its keys work again once reinstated.
	if err := s.Commands.SuspendAccount(context.Background(), acctID, commands.Meta{Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, s.Do("GET", "/v1/emails", sender, nil), 403, "account_suspended")
	if err := s.Commands.ReinstateAccount(context.Background(), acctID, commands.Meta{Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	if r := s.Do("GET", "/v1/emails", sender, nil); r.Status != 200 {
		t.Fatalf("after reinstate: %d %s", r.Status, r.Body)
	}

	// Every response carries X-Request-Id.
	if s.Do("GET", "/healthz", "", nil).Header.Get("X-Request-Id") == "" {
		t.Fatal("no X-Request-Id on /healthz")
	}
}

// TestNoSecretInDatabase issues keys and tokens and searches every table of
// the database, event store included, for their plaintext.
func TestNoSecretInDatabase(t *testing.T) {
	s := apptest.Start(t)
	acctID, admin := s.Account("Acme")
	member, err := s.Commands.IssueToken(context.Background(), acctID, account.RoleMember, commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{admin, member}
	for i := range 3 {
		r := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": fmt.Sprint("k", i)})
		key := r.JSON(t)["key"].(string)
		secrets = append(secrets, key)
		s.Do("GET", "/v1/emails", key, nil)
	}

	ctx := context.Background()
	rows, err := s.Pool.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name)
		FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		rows.Scan(&name)
		tables = append(tables, name)
	}
	rows.Close()
	if len(tables) < 5 {
		t.Fatalf("found only tables %v", tables)
	}
	searched := 0
	for _, table := range tables {
		var dump string
		if err := s.Pool.QueryRow(ctx, fmt.Sprintf("SELECT coalesce(string_agg(t::text, E'\\n'), '') FROM %s t", table)).Scan(&dump); err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		searched += len(dump)
		for _, secret := range secrets {
			// Neither the secret nor its random part may be stored.
			_, random, _ := strings.Cut(secret, "_")
			if strings.Contains(dump, random) {
				t.Errorf("table %s holds a plaintext secret", table)
			}
		}
	}
	if searched == 0 {
		t.Fatal("searched nothing")
	}
}

func TestRateLimit(t *testing.T) {
	s := apptest.Start(t, func(c *config.Config) { c.RateLimit = 0.001; c.RateBurst = 3 })
	_, admin := s.Account("Acme")
	var last apptest.Response
	for range 4 {
		last = s.Do("GET", "/api/auth/api-keys", admin, nil)
	}
	wantProblem(t, last, 429, "rate_limited")
	if !strings.Contains(problemDetail(t, last), "per credential") {
		t.Fatalf("detail does not name the credential limit: %s", last.Body)
	}
	if last.Header.Get("Retry-After") == "" || last.Header.Get("RateLimit-Limit") != "3" || last.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("rate limit headers: %v", last.Header)
	}
	// Limits are per credential: another account is unaffected.
	_, other := s.Account("Other")
	if r := s.Do("GET", "/api/auth/api-keys", other, nil); r.Status != 200 || r.Header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("other credential: %d %v", r.Status, r.Header)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	s := apptest.Start(t)
	_, admin := s.Account("Acme")
	s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "k"})
	if r := s.Do("GET", "/healthz", "", nil); r.Status != 200 {
		t.Fatalf("healthz: %d", r.Status)
	}
	if r := s.Do("GET", "/readyz", "", nil); r.Status != 200 {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}
	m := string(s.Do("GET", "/metrics", "", nil).Body)
	for _, want := range []string{
		`mailroom_http_requests_total{method="POST",route="/api/auth/api-keys",status="201"} 1`,
		`mailroom_eventstore_append_duration_seconds_count{outcome="ok"}`,
		`mailroom_projection_lag_events{projection="api_keys"} 0`,
		`mailroom_emails_failed_total{reason="suppressed"} 0`,
		`mailroom_jobs{queue="webhook",state="retryable"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The process and PostgreSQL share this machine's clock.
	var skew float64
	if _, err := fmt.Sscanf(m[strings.Index(m, "\nmailroom_clock_skew_seconds ")+1:], "mailroom_clock_skew_seconds %g", &skew); err != nil || math.Abs(skew) > 0.5 {
		t.Errorf("mailroom_clock_skew_seconds %v (%v)", skew, err)
	}
}

func TestFirstRunBootstrap(t *testing.T) {
	s := apptest.Start(t)
	ctx := context.Background()
	first, err := s.Bootstrap(ctx)
	if err != nil || first == nil {
		t.Fatalf("bootstrap: %v %v", first, err)
	}
	if first.Domain != "example.test" || !strings.HasPrefix(first.APIKey, "mr_") || !strings.HasPrefix(first.AdminToken, "mrt_") {
		t.Fatalf("first run: %+v", first)
	}
	// The key works and the sandbox domain is verified.
	if r := s.Do("GET", "/v1/emails", first.APIKey, nil); r.Status != 200 {
		t.Fatalf("bootstrap key: %d", r.Status)
	}
	list := s.Do("GET", "/api/domains", first.AdminToken, nil).JSON(t)["data"].([]any)
	if len(list) != 1 {
		t.Fatalf("domains after bootstrap: %v", list)
	}
	d := list[0].(map[string]any)
	if d["domain"] != "example.test" || d["status"] != "verified" || d["verification_status"] != "verified" {
		t.Fatalf("sandbox domain: %v", d)
	}
	// Its verification is an operator event in the history.
	evs, err := s.Store.ReadStream(ctx, sendingdomain.Stream(d["id"].(string)), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ev := range evs {
		if ev.Type == "DomainVerified" {
			found = ev.Metadata.Actor == "operator" && strings.Contains(string(ev.Data), `"method":"sandbox"`)
		}
	}
	if !found {
		t.Fatal("no DomainVerified event by the operator with method sandbox")
	}
	if err := s.FirstRunShown(); err != nil {
		t.Fatal(err)
	}
	// A second start creates nothing, and names the first account for
	// new credentials, though another was made since.
	s.Account("Later")
	if again, err := s.Bootstrap(ctx); err != nil || again != nil {
		t.Fatalf("second bootstrap: %v %v", again, err)
	}
	if acct, err := s.FirstAccount(ctx); err != nil || acct != first.AccountID {
		t.Fatalf("first account %q (%v), want %s", acct, err, first.AccountID)
	}
}

// Accounts made otherwise than by a first start from this data directory
// are named to no one: a later start has no credentials to tell about.
func TestNoFirstAccountWithoutAFirstStart(t *testing.T) {
	s := apptest.Start(t)
	s.Account("Customer")
	if acct, err := s.FirstAccount(context.Background()); err != nil || acct != "" {
		t.Fatalf("first account %q (%v), want none", acct, err)
	}
}

// A first start stopped before it showed its credentials, whether after
// the account alone or after everything, is finished by the next start:
// new credentials that work, and the sandbox domain once, verified.
func TestInterruptedFirstRunIsFinished(t *testing.T) {
	s := apptest.Start(t)
	ctx := context.Background()
	// Stopped after everything but the showing.
	done, err := s.Bootstrap(ctx)
	if err != nil || done == nil {
		t.Fatalf("bootstrap: %v %v", done, err)
	}
	again, err := s.Bootstrap(ctx)
	if err != nil || again == nil || again.AccountID != done.AccountID || again.APIKey == done.APIKey || again.AdminToken == done.AdminToken {
		t.Fatalf("the next start after an unshown first start: %+v %v", again, err)
	}
	if r := s.Do("GET", "/v1/emails", again.APIKey, nil); r.Status != 200 {
		t.Fatalf("the new key: %d %s", r.Status, r.Body)
	}
	list := s.Do("GET", "/api/domains", again.AdminToken, nil).JSON(t)["data"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["domain"] != "example.test" || list[0].(map[string]any)["status"] != "verified" {
		t.Fatalf("domains: %v", list)
	}
	if err := s.FirstRunShown(); err != nil {
		t.Fatal(err)
	}
	if more, err := s.Bootstrap(ctx); err != nil || more != nil {
		t.Fatalf("a start after the credentials were shown: %v %v", more, err)
	}

	// Stopped right after the account was created (as the first start
	// notes it): no key, no domain yet.
	t2 := apptest.Start(t)
	acct, err := t2.Commands.CreateAccount(ctx, "Development", commands.Meta{Actor: "system:bootstrap"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t2.Config.DataDir, "first-start"), []byte(acct.AccountID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := t2.Bootstrap(ctx)
	if err != nil || first == nil || first.AccountID != acct.AccountID || first.Domain != "example.test" {
		t.Fatalf("finishing a first start stopped after its account: %+v %v", first, err)
	}
	if r := t2.Do("POST", "/v1/emails/send", first.APIKey, map[string]any{"from": "a@example.test", "to": "ann@example.org", "subject": "Hi", "text": "Hi"}); r.Status != 202 {
		t.Fatalf("send with the finished first start's key: %d %s", r.Status, r.Body)
	}

	// A note naming an account this database does not hold (a data
	// directory used with another database) stops nothing, and goes.
	if err := os.WriteFile(filepath.Join(t2.Config.DataDir, "first-start"), []byte(uuid.NewString()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if stale, err := t2.Bootstrap(ctx); err != nil || stale != nil {
		t.Fatalf("a start with a stale note: %+v %v", stale, err)
	}
	if _, err := os.Stat(filepath.Join(t2.Config.DataDir, "first-start")); !os.IsNotExist(err) {
		t.Fatalf("the stale note stays: %v", err)
	}
}

// HEAD is taken wherever GET is, and answers GET's status and headers
// without a body: uptime monitors probe that way.
func TestHeadIsGetWithoutItsBody(t *testing.T) {
	s := apptest.Start(t)
	_, admin, key := s.Sender("example.test")
	for _, c := range []struct {
		path, cred string
		status     int
	}{
		{"/v1/emails", key, 200},
		{"/api/domains", admin, 200},
		{"/v1/emails/" + uuid.NewString(), key, 404},
		{"/v1/emails", "", 401},
		{"/healthz", "", 200},
	} {
		get, head := s.Do("GET", c.path, c.cred, nil), s.Do("HEAD", c.path, c.cred, nil)
		if head.Status != c.status || get.Status != c.status || len(head.Body) != 0 ||
			head.Header.Get("Content-Type") != get.Header.Get("Content-Type") || head.Header.Get("X-Request-Id") == "" {
			t.Errorf("HEAD %s: %d %q %s (GET: %d %q)", c.path, head.Status, head.Header.Get("Content-Type"), head.Body,
				get.Status, get.Header.Get("Content-Type"))
		}
	}
}

// A method a route does not take is 405 with the methods it does take,
// after authentication; a path that is no route is 404.
func TestWrongMethodIs405(t *testing.T) {
	s := apptest.Start(t)
	_, admin, key := s.Sender("example.test")
	for _, c := range []struct {
		method, path, cred, allow string
	}{
		{"PUT", "/v1/webhooks/" + uuid.NewString(), key, "GET, HEAD, PATCH, DELETE"},
		{"DELETE", "/v1/emails/" + uuid.NewString(), key, "GET, HEAD"},
		{"PATCH", "/v1/emails/send", key, "GET, HEAD, POST"}, // GET takes it as an email id
		{"PUT", "/api/domains", admin, "GET, HEAD, POST"},
		{"GET", "/api/erasures", admin, "POST"},
	} {
		r := s.Do(c.method, c.path, c.cred, nil)
		wantProblem(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
		if got := r.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
		if want := c.method + " is not allowed on this resource; it takes " + c.allow; r.JSON(t)["detail"] != want {
			t.Errorf("%s %s: %s", c.method, c.path, r.Body)
		}
	}
	wantProblem(t, s.Do("GET", "/v1/nothing-here", key, nil), http.StatusNotFound, "not_found")
	wantProblem(t, s.Do("POST", "/v1/emails/send/", key, nil), http.StatusNotFound, "not_found")
	wantProblem(t, s.Do("DELETE", "/v1/emails/"+uuid.NewString()+"/", key, nil), http.StatusNotFound, "not_found")
	wantProblem(t, s.Do("PUT", "/api/nothing/here", admin, nil), http.StatusNotFound, "not_found")
	wantProblem(t, s.Do("PUT", "/v1/webhooks/x", "", nil), http.StatusUnauthorized, "")
}

// Revoked keys pile up when a client makes and revokes one per deployment;
// the list keeps every active key and the latest revoked ones, newest
// first, not all of them.
func TestKeyListShowsEveryActiveKeyAndTheLatestRevoked(t *testing.T) {
	s := apptest.Start(t)
	_, admin, key := s.Sender("acme.test")
	var revoked []string
	for i := range readapi.ListedRevokedKeys + 5 {
		r := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": fmt.Sprintf("deploy %d", i)})
		if r.Status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["id"].(string)
		if r := s.Do("DELETE", "/api/auth/api-keys/"+id, admin, nil); r.Status != http.StatusNoContent {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		revoked = append(revoked, id)
	}
	latest := s.Do("POST", "/api/auth/api-keys", admin, map[string]any{"name": "latest"}).JSON(t)["id"].(string)

	var ids []string
	var firstListed bool
	for _, k := range s.Do("GET", "/api/auth/api-keys", admin, nil).JSON(t)["data"].([]any) {
		k := k.(map[string]any)
		ids = append(ids, k["id"].(string))
		firstListed = firstListed || (k["key_preview"] == key[:9]+"..." && k["is_active"] == true)
	}
	if len(ids) != readapi.ListedRevokedKeys+2 || ids[0] != latest {
		t.Fatalf("%d keys listed, first %v; want %d, the newest first", len(ids), ids[:1], readapi.ListedRevokedKeys+2)
	}
	if !firstListed || ids[len(ids)-1] == latest {
		t.Fatal("the account's first active key is not listed last")
	}
	slices.Reverse(revoked)
	if want := revoked[:readapi.ListedRevokedKeys]; !slices.Equal(ids[1:len(ids)-1], want) {
		t.Fatalf("revoked keys listed are not the latest %d, newest first", readapi.ListedRevokedKeys)
	}
}
