package app_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/provider/sandbox"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// dnsWorld is a Mailroom whose domain checks query two local DNS servers.
type dnsWorld struct {
	*apptest.Server
	a, b   *dnstest.Server
	admin  string
	member string
}

func newDNSWorld(t *testing.T, configure ...func(*config.Config)) *dnsWorld {
	a, b := dnstest.Start(t), dnstest.Start(t)
	s := apptest.Start(t, append([]func(*config.Config){func(c *config.Config) {
		c.DNSResolvers = a.Addr() + "," + b.Addr()
		c.DNSTimeout = time.Second
		c.DomainPollInterval = time.Hour // tests tick the poller themselves
	}}, configure...)...)
	acctID, admin := s.Account("Acme")
	member, err := s.Commands.IssueToken(context.Background(), acctID, account.RoleMember, commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	return &dnsWorld{Server: s, a: a, b: b, admin: admin, member: member}
}

// publish serves a domain's dns_records, as the API returned them, on the
// given servers.
func publish(t *testing.T, d map[string]any, servers ...*dnstest.Server) {
	t.Helper()
	for _, rec := range d["dns_records"].([]any) {
		r := rec.(map[string]any)
		pr := 0
		if p, ok := r["priority"].(float64); ok {
			pr = int(p)
		}
		for _, s := range servers {
			s.Add(dnscheck.Record{Type: r["type"].(string), Name: r["name"].(string), Value: r["value"].(string), Priority: pr})
		}
	}
}

func (w *dnsWorld) add(t *testing.T, name string) map[string]any {
	t.Helper()
	r := w.Do("POST", "/api/domains", w.admin, map[string]any{"domain": name})
	if r.Status != 201 {
		t.Fatalf("add %s: %d %s", name, r.Status, r.Body)
	}
	return r.JSON(t)
}

func (w *dnsWorld) get(t *testing.T, id string) map[string]any {
	t.Helper()
	r := w.Do("GET", "/api/domains/"+id, w.admin, nil)
	if r.Status != 200 {
		t.Fatalf("get %s: %d %s", id, r.Status, r.Body)
	}
	return r.JSON(t)
}

func (w *dnsWorld) verify(t *testing.T, id string) map[string]any {
	t.Helper()
	r := w.Do("POST", "/api/domains/"+id+"/verify", w.admin, nil)
	if r.Status != 200 {
		t.Fatalf("verify %s: %d %s", id, r.Status, r.Body)
	}
	return r.JSON(t)
}

func (w *dnsWorld) tick(t *testing.T) {
	t.Helper()
	pollDomains(t, w.Server)
}

// pollDomains runs one pass of the domain poller, waiting while the
// server's own background poller holds the poll lock, and then for the
// domains read model to show what the pass recorded: unlike a request,
// the poller does not wait for it.
func pollDomains(t *testing.T, s *apptest.Server) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ran, err := s.DomainPoller().Tick(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ran {
			showLog(t, s, projections.DomainsName)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the domain poll lock stayed taken")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// showLog waits until the named read models show the whole log as it is
// now.
func showLog(t *testing.T, s *apptest.Server, names ...projections.Name) {
	t.Helper()
	ctx := context.Background()
	head := eventstore.Start
	for {
		evs, err := s.Ledger.ReadAll(ctx, head, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		head = evs[len(evs)-1].Position
	}
	// A loaded machine may need longer than one wait of the server's.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.Waiter.WaitFor(ctx, head, names...)
		var lag *projections.LagError
		if !errors.As(err, &lag) || time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("read models never showed the log: %v", err)
			}
			return
		}
	}
}

// waitForIdentityCall waits until the sandbox provider has recorded a call.
func (w *dnsWorld) waitForIdentityCall(t *testing.T, want sandbox.Call) {
	t.Helper()
	ids := w.Identities.(*sandbox.Identities)
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, c := range ids.Calls() {
			if c == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider never got %+v; calls: %+v", want, ids.Calls())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func statuses(d map[string]any) string {
	return fmt.Sprintf("status=%v verification=%v dkim=%v mail_from=%v", d["status"], d["verification_status"], d["dkim_status"], d["mail_from_status"])
}

func dkimSelectors(d map[string]any) []string {
	var out []string
	for _, rec := range d["dns_records"].([]any) {
		r := rec.(map[string]any)
		if r["group"] == "dkim" {
			out = append(out, strings.SplitN(r["name"].(string), ".", 2)[0])
		}
	}
	return out
}

func TestDomainVerification(t *testing.T) {
	w := newDNSWorld(t)
	d := w.add(t, "Example.COM.")
	id := d["id"].(string)

	if d["domain"] != "example.com" || statuses(d) != "status=pending verification=pending dkim=pending mail_from=pending" {
		t.Fatalf("new domain: %s %s", d["domain"], statuses(d))
	}
	if d["dkim_mode"] != "byodkim" || !regexp.MustCompile(`^mr[a-z0-9]{6}$`).MatchString(d["dkim_selector"].(string)) ||
		d["mail_from_domain"] != "send.example.com" || d["dkim_transition"] != nil || d["rotation_due"] != false ||
		d["region"] != "us-east-1" || !timestamp.MatchString(d["created_at"].(string)) {
		t.Fatalf("new domain fields: %v", d)
	}
	if _, ok := d["dns_check"]; ok {
		t.Fatal("dns_check outside the verify response")
	}
	recs := d["dns_records"].([]any)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	groups := map[string][]string{}
	for _, rec := range recs {
		r := rec.(map[string]any)
		groups[r["group"].(string)] = append(groups[r["group"].(string)], r["type"].(string))
		_, hasPriority := r["priority"]
		if hasPriority != (r["type"] == "MX") {
			t.Errorf("priority on %v", r)
		}
		switch {
		case r["type"] == "MX" && (r["value"] != "feedback-smtp.us-east-1.amazonses.com" || r["priority"] != 10.0 || r["name"] != "send.example.com"):
			t.Errorf("MX record %v", r)
		case r["group"] == "dkim" && (r["name"] != d["dkim_selector"].(string)+"._domainkey.example.com" || !strings.HasPrefix(r["value"].(string), "v=DKIM1; k=rsa; p=")):
			t.Errorf("DKIM record %v", r)
		case r["group"] == "dmarc" && (r["name"] != "_dmarc.example.com" || r["value"] != "v=DMARC1; p=none;"):
			t.Errorf("DMARC record %v", r)
		}
	}
	if fmt.Sprint(groups) != "map[dkim:[TXT] dmarc:[TXT] mail_from:[MX TXT]]" {
		t.Fatalf("record groups %v", groups)
	}

	// The same name again: 409. Bad names: 422 naming the field.
	wantProblem(t, w.Do("POST", "/api/domains", w.admin, map[string]any{"domain": "example.com"}), 409, "domain_exists")
	for _, bad := range []string{"", "localhost", "10.0.0.1", "[::1]", strings.Repeat("a", 64) + ".com", strings.Repeat("abcdefghi.", 26) + "com", "co.uk", "☃.com"} {
		r := w.Do("POST", "/api/domains", w.admin, map[string]any{"domain": bad})
		wantProblem(t, r, 422, "validation_failed")
		if !strings.Contains(string(r.Body), `"field":"domain"`) {
			t.Errorf("%q: error does not name the field: %s", bad, r.Body)
		}
	}

	// Nothing published: pending, both resolvers not ok.
	v := w.verify(t, id)
	check := v["dns_check"].(map[string]any)
	results := check["results"].([]any)
	if check["ok"] != false || len(results) != 2 || statuses(v) != "status=pending verification=pending dkim=pending mail_from=pending" {
		t.Fatalf("verify with nothing published: %v %s", check, statuses(v))
	}
	if results[0].(map[string]any)["server"] != w.a.Addr() || results[1].(map[string]any)["server"] != w.b.Addr() {
		t.Fatalf("results name %v, want the two resolvers", results)
	}
	for _, r := range results {
		if r.(map[string]any)["ok"] != false {
			t.Fatalf("result ok with nothing published: %v", results)
		}
	}

	// Published on one resolver only: still pending, one result ok.
	publish(t, d, w.a)
	v = w.verify(t, id)
	results = v["dns_check"].(map[string]any)["results"].([]any)
	if v["status"] != "pending" || results[0].(map[string]any)["ok"] != true || results[1].(map[string]any)["ok"] != false {
		t.Fatalf("published on one: %s %v", statuses(v), results)
	}
	// Each result says what the resolver found of each record, and why one
	// did not count.
	for i, want := range []string{"", "NXDOMAIN"} {
		records, _ := results[i].(map[string]any)["records"].([]any)
		if len(records) != len(d["dns_records"].([]any)) {
			t.Fatalf("resolver %d lists %d records, want each of %d: %v", i, len(records), len(d["dns_records"].([]any)), results[i])
		}
		for _, r := range records {
			r := r.(map[string]any)
			if r["type"] == "" || r["name"] == "" || r["ok"] != (want == "") || (r["reason"] != nil && r["reason"] != want) || (want != "" && r["reason"] != want) {
				t.Fatalf("resolver %d record %v, want ok=%v reason %q", i, r, want == "", want)
			}
		}
	}

	// Published on both: verified.
	publish(t, d, w.b)
	v = w.verify(t, id)
	if v["dns_check"].(map[string]any)["ok"] != true || statuses(v) != "status=verified verification=verified dkim=success mail_from=success" {
		t.Fatalf("published on both: %s %v", statuses(v), v["dns_check"])
	}
	if g := w.get(t, id); statuses(g) != statuses(v) {
		t.Fatalf("GET after verify: %s", statuses(g))
	}
	if st, err := readapi.SendingDomain(context.Background(), w.Pool, accountOf(t, w), "example.com"); err != nil || !st.CanSend() {
		t.Fatalf("sending port: %v %v", st.Status, err)
	}

	// A wrong DKIM value is not verified, though MAIL FROM is.
	d2 := w.add(t, "wrong.example")
	publish(t, d2, w.a, w.b)
	for _, s := range []*dnstest.Server{w.a, w.b} {
		s.Set(dnscheck.Record{Type: "TXT", Name: d2["dkim_selector"].(string) + "._domainkey.wrong.example", Value: "v=DKIM1; k=rsa; p=AAAA"})
	}
	v = w.verify(t, d2["id"].(string))
	if statuses(v) != "status=pending verification=pending dkim=pending mail_from=success" {
		t.Fatalf("wrong DKIM value: %s", statuses(v))
	}

	// The list.
	list := w.Do("GET", "/api/domains", w.member, nil).JSON(t)
	if list["total"] != 2.0 || len(list["data"].([]any)) != 2 {
		t.Fatalf("list: %v", list)
	}
}

func accountOf(t *testing.T, w *dnsWorld) string {
	var id string
	if err := w.Pool.QueryRow(context.Background(), "SELECT id FROM accounts WHERE name = 'Acme'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestDomainVerificationWindow(t *testing.T) {
	w := newDNSWorld(t)
	d := w.add(t, "late.example")
	id := d["id"].(string)

	w.Clock.Advance(71 * time.Hour)
	w.tick(t)
	if g := w.get(t, id); g["status"] != "pending" {
		t.Fatalf("expired before 72 hours: %s", statuses(g))
	}
	w.Clock.Advance(time.Hour)
	w.tick(t)
	if g := w.get(t, id); g["status"] != "failed" || g["verification_status"] != "pending" {
		t.Fatalf("after 72 hours: %s", statuses(g))
	}
	// Polling stops: published records are not picked up by the poll.
	publish(t, d, w.a, w.b)
	w.tick(t)
	if g := w.get(t, id); g["status"] != "failed" {
		t.Fatalf("the poll revived an expired domain: %s", statuses(g))
	}
	// verify resets the window and checks at once.
	if v := w.verify(t, id); v["status"] != "verified" {
		t.Fatalf("verify after expiry: %s", statuses(v))
	}

	// Reset without the records: pending again, with a fresh 72 hours.
	d2 := w.add(t, "later.example")
	w.Clock.Advance(73 * time.Hour)
	w.tick(t)
	if g := w.get(t, d2["id"].(string)); g["status"] != "failed" {
		t.Fatalf("not expired: %s", statuses(g))
	}
	if v := w.verify(t, d2["id"].(string)); v["status"] != "pending" {
		t.Fatalf("verify without records after expiry: %s", statuses(v))
	}
	w.Clock.Advance(71 * time.Hour)
	w.tick(t)
	if g := w.get(t, d2["id"].(string)); g["status"] != "pending" {
		t.Fatalf("the reset window ended early: %s", statuses(g))
	}
	w.Clock.Advance(2 * time.Hour)
	w.tick(t)
	if g := w.get(t, d2["id"].(string)); g["status"] != "failed" {
		t.Fatalf("the reset window never ended: %s", statuses(g))
	}
}

func TestDomainBackgroundPoll(t *testing.T) {
	w := newDNSWorld(t, func(c *config.Config) { c.DomainPollInterval = 20 * time.Millisecond })
	d := w.add(t, "polled.example")
	publish(t, d, w.a, w.b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.DomainPoller().Run(ctx)
	deadline := time.Now().Add(60 * time.Second)
	for {
		g := w.get(t, d["id"].(string))
		if g["status"] == "verified" {
			if g["dkim_status"] != "success" || g["mail_from_status"] != "success" {
				t.Fatalf("polled: %s", statuses(g))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background poll did not verify the domain: %s", statuses(g))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDomainRotation(t *testing.T) {
	w := newDNSWorld(t)
	d := w.add(t, "rotate.example")
	id := d["id"].(string)
	publish(t, d, w.a, w.b)
	w.verify(t, id)
	oldSel := d["dkim_selector"].(string)

	w.waitForIdentityCall(t, sandbox.Call{Op: "create", Domain: "rotate.example", Selector: oldSel})

	wantProblem(t, w.Do("POST", "/api/domains/"+id+"/rotate", w.member, nil), 403, "role_required")
	r := w.Do("POST", "/api/domains/"+id+"/rotate", w.admin, nil)
	if r.Status != 200 {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	rot := r.JSON(t)
	tr := rot["dkim_transition"].(map[string]any)
	newSel := tr["selector"].(string)
	if newSel == oldSel || tr["kind"] != "rotation" || tr["state"] != "awaiting_dns" || rot["dkim_selector"] != oldSel ||
		!timestamp.MatchString(tr["started_at"].(string)) || tr["cut_over_at"] != nil || tr["old_key_retires_at"] != nil {
		t.Fatalf("after rotate: selector %v transition %v", rot["dkim_selector"], tr)
	}
	if fmt.Sprint(dkimSelectors(rot)) != fmt.Sprint([]string{oldSel, newSel}) {
		t.Fatalf("DKIM records during rotation: %v", dkimSelectors(rot))
	}
	wantProblem(t, w.Do("POST", "/api/domains/"+id+"/rotate", w.admin, nil), 409, "transition_in_progress")

	// Until the new record is published, nothing changes.
	w.tick(t)
	if g := w.get(t, id); g["dkim_transition"].(map[string]any)["state"] != "awaiting_dns" {
		t.Fatal("cut over before the new record was published")
	}
	// The owner publishes the new record and, too early, takes the old
	// one down: the check that cuts over judges the key in use from then
	// on, so the domain reads all published.
	publish(t, rot, w.a, w.b)
	for _, srv := range []*dnstest.Server{w.a, w.b} {
		srv.Remove(oldSel+"._domainkey.rotate.example", "TXT")
	}
	w.tick(t)
	g := w.get(t, id)
	tr = g["dkim_transition"].(map[string]any)
	if tr["state"] != "cut_over" || g["dkim_selector"] != newSel || len(dkimSelectors(g)) != 2 {
		t.Fatalf("after publishing the new record: %v %v", g["dkim_selector"], tr)
	}
	if g["dkim_status"] != "success" || g["mail_from_status"] != "success" || g["status"] != "verified" {
		t.Fatalf("after the cutover: %s", statuses(g))
	}
	if v := w.verify(t, id); v["dns_check"].(map[string]any)["ok"] != true || v["dkim_status"] != "success" {
		t.Fatalf("verify after the cutover: %s %v", statuses(v), v["dns_check"])
	}
	w.waitForIdentityCall(t, sandbox.Call{Op: "set_signing_key", Domain: "rotate.example", Selector: newSel})
	cut, _ := time.Parse(time.RFC3339, tr["cut_over_at"].(string))
	retires, _ := time.Parse(time.RFC3339, tr["old_key_retires_at"].(string))
	if retires.Sub(cut) != 7*24*time.Hour {
		t.Fatalf("old key retires %v after cutover, want 7 days", retires.Sub(cut))
	}

	// A restart in between changes nothing.
	cfg := w.Config
	w.Stop()
	s2 := apptest.StartWithClock(t, cfg, w.Clock)
	w.Server = s2
	if g2 := w.get(t, id); fmt.Sprint(g2) != fmt.Sprint(g) {
		t.Fatalf("restart changed the domain:\n%v\n%v", g, g2)
	}
	w.Clock.Advance(7*24*time.Hour - time.Minute)
	w.tick(t)
	if g := w.get(t, id); len(dkimSelectors(g)) != 2 {
		t.Fatal("old key retired before 7 days")
	}
	w.Clock.Advance(2 * time.Minute)
	w.tick(t)
	g = w.get(t, id)
	if fmt.Sprint(dkimSelectors(g)) != fmt.Sprint([]string{newSel}) || g["dkim_transition"] != nil || g["status"] != "verified" {
		t.Fatalf("after 7 days: %v %v", dkimSelectors(g), g["dkim_transition"])
	}
}

// Rotating a domain that is not verified yet gives it a new key in place of
// the old one, which signed nothing: the new key's record is the one to
// publish, the provider's identity signs with it, and the domain verifies
// with it.
func TestRotatingAPendingDomainReplacesItsKey(t *testing.T) {
	w := newDNSWorld(t)
	d := w.add(t, "fresh.example")
	id, oldSel := d["id"].(string), d["dkim_selector"].(string)
	w.waitForIdentityCall(t, sandbox.Call{Op: "create", Domain: "fresh.example", Selector: oldSel})
	wantProblem(t, w.Do("POST", "/api/domains/"+id+"/rotate", w.member, nil), 403, "role_required")
	r := w.Do("POST", "/api/domains/"+id+"/rotate", w.admin, nil)
	if r.Status != 200 {
		t.Fatalf("rotate a pending domain: %d %s", r.Status, r.Body)
	}
	rot := r.JSON(t)
	newSel := rot["dkim_selector"].(string)
	if newSel == oldSel || rot["dkim_transition"] != nil || rot["status"] != "pending" || rot["dkim_status"] != "pending" {
		t.Fatalf("after rotating a pending domain: %s selector %v transition %v", statuses(rot), newSel, rot["dkim_transition"])
	}
	if fmt.Sprint(dkimSelectors(rot)) != fmt.Sprint([]string{newSel}) {
		t.Fatalf("DKIM records after rotating a pending domain: %v, want only %s", dkimSelectors(rot), newSel)
	}
	if g := w.get(t, id); g["dkim_selector"] != newSel || fmt.Sprint(dkimSelectors(g)) != fmt.Sprint([]string{newSel}) {
		t.Fatalf("read after rotating a pending domain: selector %v records %v", g["dkim_selector"], dkimSelectors(g))
	}
	w.waitForIdentityCall(t, sandbox.Call{Op: "set_signing_key", Domain: "fresh.example", Selector: newSel})
	publish(t, rot, w.a, w.b)
	if g := w.verify(t, id); g["status"] != "verified" || g["dkim_selector"] != newSel {
		t.Fatalf("verify with the new key: %s selector %v", statuses(g), g["dkim_selector"])
	}
}

// A resolver that does not return the key awaiting DNS is not ok, nor is
// the check: its owner has a record left to publish. The domain stays
// verified and signing with the key in use meanwhile.
func TestDomainRotationNeedsTheNewKeyOnEveryResolver(t *testing.T) {
	w := newDNSWorld(t)
	d := w.add(t, "halfway.example")
	id := d["id"].(string)
	publish(t, d, w.a, w.b)
	if v := w.verify(t, id); v["status"] != "verified" {
		t.Fatalf("before the rotation: %s", statuses(v))
	}
	oldSel := d["dkim_selector"].(string)
	r := w.Do("POST", "/api/domains/"+id+"/rotate", w.admin, nil)
	if r.Status != 200 {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	newSel := r.JSON(t)["dkim_transition"].(map[string]any)["selector"].(string)
	var newKey dnscheck.Record
	for _, rec := range r.JSON(t)["dns_records"].([]any) {
		if rec := rec.(map[string]any); rec["name"] == newSel+"._domainkey.halfway.example" {
			newKey = dnscheck.Record{Type: rec["type"].(string), Name: rec["name"].(string), Value: rec["value"].(string)}
		}
	}
	if newKey.Name == "" {
		t.Fatalf("the rotation lists no record for %s: %s", newSel, r.Body)
	}

	// Published on one resolver only.
	w.a.Add(newKey)
	v := w.verify(t, id)
	check := v["dns_check"].(map[string]any)
	results := check["results"].([]any)
	if check["ok"] != false || results[0].(map[string]any)["ok"] != true || results[1].(map[string]any)["ok"] != false {
		t.Fatalf("the new key on one resolver: %v", check)
	}
	for _, rec := range results[1].(map[string]any)["records"].([]any) {
		if rec := rec.(map[string]any); rec["name"] == newKey.Name && (rec["ok"] != false || rec["reason"] != "NXDOMAIN") {
			t.Fatalf("the resolver without the new key: %v", rec)
		}
	}
	if statuses(v) != "status=verified verification=verified dkim=success mail_from=success" ||
		v["dkim_selector"] != oldSel || v["dkim_transition"].(map[string]any)["state"] != "awaiting_dns" {
		t.Fatalf("the new key on one resolver: %s, selector %v, transition %v", statuses(v), v["dkim_selector"], v["dkim_transition"])
	}
	if st, err := readapi.SendingDomain(context.Background(), w.Pool, accountOf(t, w), "halfway.example"); err != nil || !st.CanSend() {
		t.Fatalf("sending while the new key propagates: %v %v", st.Status, err)
	}

	// Published on both: ok, and the key in use is the new one.
	w.b.Add(newKey)
	v = w.verify(t, id)
	check = v["dns_check"].(map[string]any)
	for _, res := range check["results"].([]any) {
		if res.(map[string]any)["ok"] != true {
			t.Fatalf("the new key on both resolvers: %v", check)
		}
	}
	if check["ok"] != true || v["dkim_selector"] != newSel || v["dkim_transition"].(map[string]any)["state"] != "cut_over" || v["status"] != "verified" {
		t.Fatalf("the new key on both resolvers: ok %v, %s, selector %v, transition %v", check["ok"], statuses(v), v["dkim_selector"], v["dkim_transition"])
	}

	// The old key is being retired: a resolver that no longer returns it
	// is still ok.
	w.b.Remove(oldSel+"._domainkey.halfway.example", "TXT")
	if v := w.verify(t, id); v["dns_check"].(map[string]any)["ok"] != true {
		t.Fatalf("the old key taken down after the cutover: %v", v["dns_check"])
	}
}

func TestDomainUpgradeAndRemoval(t *testing.T) {
	w := newDNSWorld(t)
	acct := accountOf(t, w)
	legacy, err := w.Commands.ImportLegacyDomain(context.Background(), acct, "legacy.example", commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	g := w.get(t, legacy.ID)
	if g["dkim_mode"] != "legacy" || len(dkimSelectors(g)) != 3 || g["dns_records"].([]any)[0].(map[string]any)["type"] != "CNAME" {
		t.Fatalf("imported legacy domain: %v", g)
	}
	r := w.Do("POST", "/api/domains/"+legacy.ID+"/upgrade", w.member, nil)
	if r.Status != 200 {
		t.Fatalf("upgrade: %d %s", r.Status, r.Body)
	}
	up := r.JSON(t)
	if tr := up["dkim_transition"].(map[string]any); tr["kind"] != "upgrade" || tr["state"] != "awaiting_dns" || up["dkim_mode"] != "legacy" {
		t.Fatalf("after upgrade: %v %v", up["dkim_mode"], tr)
	}
	if len(dkimSelectors(up)) != 4 {
		t.Fatalf("the new key must be published beside the CNAMEs: %v", dkimSelectors(up))
	}
	publish(t, up, w.a, w.b)
	v := w.verify(t, legacy.ID)
	if v["dkim_mode"] != "byodkim" || v["status"] != "verified" || v["dkim_transition"].(map[string]any)["state"] != "cut_over" {
		t.Fatalf("after publishing: %s %v %v", statuses(v), v["dkim_mode"], v["dkim_transition"])
	}
	// The legacy identity was created without a key; the upgrade hands it one.
	w.waitForIdentityCall(t, sandbox.Call{Op: "create", Domain: "legacy.example"})
	w.waitForIdentityCall(t, sandbox.Call{Op: "set_signing_key", Domain: "legacy.example", Selector: v["dkim_selector"].(string)})

	d := w.add(t, "byo.example")
	wantProblem(t, w.Do("POST", "/api/domains/"+d["id"].(string)+"/upgrade", w.admin, nil), 409, "already_byodkim")

	// Removal: members may not; admins may; then it is gone everywhere.
	id := d["id"].(string)
	publish(t, d, w.a, w.b)
	w.verify(t, id)
	wantProblem(t, w.Do("DELETE", "/api/domains/"+id, w.member, nil), 403, "role_required")
	if r := w.Do("DELETE", "/api/domains/"+id, w.admin, nil); r.Status != 204 || len(r.Body) != 0 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	wantProblem(t, w.Do("GET", "/api/domains/"+id, w.admin, nil), 404, "not_found")
	w.waitForIdentityCall(t, sandbox.Call{Op: "delete", Domain: "byo.example"})
	for _, item := range w.Do("GET", "/api/domains", w.admin, nil).JSON(t)["data"].([]any) {
		if item.(map[string]any)["id"] == id {
			t.Fatal("removed domain still listed")
		}
	}
	if _, err := readapi.SendingDomain(context.Background(), w.Pool, acct, "byo.example"); !errors.Is(err, readapi.ErrNotFound) {
		t.Fatalf("sending still finds the removed domain: %v", err)
	}
	wantProblem(t, w.Do("DELETE", "/api/domains/"+id, w.admin, nil), 404, "not_found")
	// The name is free again.
	if again := w.add(t, "byo.example"); again["id"] == id || again["status"] != "pending" {
		t.Fatalf("re-added: %v", again)
	}
}

func TestDomainsOfAnotherAccount(t *testing.T) {
	w := newDNSWorld(t)
	d := w.add(t, "mine.example")
	id := d["id"].(string)
	_, other := w.Account("Other")
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/domains/" + id},
		{"POST", "/api/domains/" + id + "/verify"},
		{"POST", "/api/domains/" + id + "/upgrade"},
		{"POST", "/api/domains/" + id + "/rotate"},
		{"DELETE", "/api/domains/" + id},
	} {
		wantProblem(t, w.Do(req.method, req.path, other, nil), 404, "not_found")
	}
	if n := len(w.Do("GET", "/api/domains", other, nil).JSON(t)["data"].([]any)); n != 0 {
		t.Fatalf("other account lists %d domains", n)
	}
	// Nor may it add the same name for itself while this one holds it.
	wantProblem(t, w.Do("POST", "/api/domains", other, map[string]any{"domain": "mine.example"}), 409, "domain_unavailable")
	if g := w.get(t, id); g["domain"] != "mine.example" {
		t.Fatal("first account's domain changed")
	}
}

// The poller checks several domains at once: one account's domains whose
// DNS answers slowly do not hold every other domain behind them.
func TestPollerChecksDomainsSideBySide(t *testing.T) {
	w := newDNSWorld(t)
	for i := range 4 {
		w.add(t, fmt.Sprintf("slow%d.example", i))
	}
	w.a.SetDelay(300 * time.Millisecond)
	w.b.SetDelay(300 * time.Millisecond)
	w.tick(t)
	// One domain's check asks its four records at once; more than that
	// in flight means several domains were being checked together.
	if peak := w.a.PeakConcurrency(); peak <= 4 {
		t.Fatalf("at most %d queries in flight: the domains were checked one after another", peak)
	}
}

// A configured resolver that answers none of a pending domain's lookups is
// the operator's to fix, not the domain owner's: the poller says which, in
// a line that folds however many domains wait. A resolver that answers,
// even that a record is missing, is no trouble of the operator's.
func TestAResolverThatDoesNotAnswerIsNamedInTheLog(t *testing.T) {
	answering := dnstest.Start(t)
	silent := "127.0.0.1:9" // nothing listens: the query is refused
	s := apptest.Start(t, func(c *config.Config) {
		c.DNSResolvers, c.DNSTimeout = answering.Addr()+","+silent, time.Second
	})
	_, admin := s.Account("Acme")
	if r := s.Do("POST", "/api/domains", admin, map[string]any{"domain": "pending.example"}); r.Status != 201 {
		t.Fatalf("add: %d %s", r.Status, r.Body)
	}
	showLog(t, s, projections.DomainsName)
	logs := &lockedLog{}
	poller := s.DomainPoller()
	poller.Log = slog.New(slog.NewTextHandler(logs, nil))
	deadline := time.Now().Add(60 * time.Second)
	for {
		ran, err := poller.Tick(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ran {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the domain poll lock stayed taken")
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	if !strings.Contains(out, "DNS resolver not answering") || !strings.Contains(out, "server="+silent) {
		t.Fatalf("no warning naming %s:\n%s", silent, out)
	}
	if strings.Contains(out, "server="+answering.Addr()) {
		t.Fatalf("the resolver that answers is named:\n%s", out)
	}
}
