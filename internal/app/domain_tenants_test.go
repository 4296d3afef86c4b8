package app_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/provider/sandbox"
	"github.com/mailroom/mailroom/internal/provider/ses"
	"github.com/mailroom/mailroom/internal/provider/ses/sesfake"
)

// newSESDomainWorld runs Mailroom with the SES provider pointed at the
// protocol-level fake, and domain checks at one local DNS server.
func newSESDomainWorld(t *testing.T) (*apptest.Server, *sesfake.Server, *dnstest.Server) {
	fake := sesfake.Start(t)
	fakeAWSEnv(t)
	dns := dnstest.Start(t)
	s := apptest.Start(t, func(c *config.Config) {
		c.DNSResolvers = dns.Addr()
		c.DNSTimeout = time.Second
		c.DomainPollInterval = time.Hour
		c.Provider = "ses"
		c.SESEndpoint = fake.URL()
		c.SESConfigSet = "mailroom"
	})
	return s, fake, dns
}

// waitIdentity waits until SES holds an identity called name.
func waitIdentity(t *testing.T, fake *sesfake.Server, name string) sesfake.Identity {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if id, ok := fake.Identity(name); ok && id.MailFromDomain != "" {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("SES never got the identity %s; changes: %v", name, fake.IdentityLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// activeKey is the domain's signing key as SES receives it: base64 of the
// PKCS #1 DER.
func activeKey(t *testing.T, s *apptest.Server, domainID string) string {
	t.Helper()
	st, err := s.Commands.Domain(context.Background(), domainID)
	if err != nil || st.Active == nil {
		t.Fatalf("domain %s: %v %+v", domainID, err, st)
	}
	key, err := dkimkey.Open(s.Box, domainID, *st.Active)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(x509.MarshalPKCS1PrivateKey(key))
}

// identityChanges counts the changes SES made to an identity, by kind.
func identityChanges(fake *sesfake.Server, name string) map[string]int {
	n := map[string]int{}
	for _, l := range fake.IdentityLog() {
		if op, on, _ := strings.Cut(l, " "); on == name {
			n[op]++
		}
	}
	return n
}

// With SES, a domain one account verified stays its own: another account
// can neither add the name nor reach the domain, and SES keeps the first
// account's identity, key and owner tag; the first account still sends.
func TestSESIdentityStaysWithItsAccount(t *testing.T) {
	s, fake, dns := newSESDomainWorld(t)
	fake.SetStatuses("SUCCESS", "SUCCESS")
	ctx := context.Background()
	acctA, adminA := s.Account("Victim")
	_, adminB := s.Account("Intruder")

	r := s.Do("POST", "/api/domains", adminA, map[string]any{"domain": "victim.com"})
	if r.Status != 201 {
		t.Fatalf("add: %d %s", r.Status, r.Body)
	}
	d := r.JSON(t)
	idA := d["id"].(string)
	waitIdentity(t, fake, "victim.com")
	publish(t, d, dns)
	if v := s.Do("POST", "/api/domains/"+idA+"/verify", adminA, nil).JSON(t); v["status"] != "verified" {
		t.Fatalf("verify: %s", statuses(v))
	}
	keyA := activeKey(t, s, idA)

	for _, name := range []string{"victim.com", "VICTIM.com."} {
		r := s.Do("POST", "/api/domains", adminB, map[string]any{"domain": name})
		wantProblem(t, r, 409, "domain_unavailable")
		for _, secret := range []string{acctA, idA, "Victim"} {
			if strings.Contains(string(r.Body), secret) {
				t.Fatalf("the refusal reveals the holder (%s): %s", secret, r.Body)
			}
		}
	}
	for _, req := range []struct{ method, path string }{
		{"DELETE", "/api/domains/" + idA},
		{"POST", "/api/domains/" + idA + "/upgrade"},
		{"POST", "/api/domains/" + idA + "/rotate"},
		{"POST", "/api/domains/" + idA + "/verify"},
	} {
		wantProblem(t, s.Do(req.method, req.path, adminB, nil), 404, "not_found")
	}

	// B's next domain reaches SES, so the identities process manager has
	// passed everything before it.
	if r := s.Do("POST", "/api/domains", adminB, map[string]any{"domain": "intruder.example"}); r.Status != 201 {
		t.Fatalf("add: %d %s", r.Status, r.Body)
	}
	waitIdentity(t, fake, "intruder.example")
	got, ok := fake.Identity("victim.com")
	if !ok || got.Tags[ses.OwnerTag] != idA || got.PrivateKey != keyA || got.Selector != d["dkim_selector"] {
		t.Fatalf("A's identity at SES: present=%v tags=%v selector=%s same key=%v", ok, got.Tags, got.Selector, got.PrivateKey == keyA)
	}
	if n := identityChanges(fake, "victim.com"); n["create"] != 1 || n["delete"] != 0 || n["set_signing_key"] != 0 {
		t.Fatalf("changes to A's identity: %v", n)
	}
	if other, _ := fake.Identity("intruder.example"); other.Tags[ses.OwnerTag] == "" || other.Tags[ses.OwnerTag] == idA {
		t.Fatalf("B's identity owner: %v", other.Tags)
	}

	// A still sends from its domain.
	key, err := s.Commands.CreateAPIKey(ctx, acctA, "app", nil, commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	w := &sendWorld{Server: s, account: acctA, admin: adminA, key: key.Key}
	id := w.send(t, map[string]any{"from": "hello@victim.com", "to": "ann@example.org", "subject": "still mine", "text": "t"})["id"].(string)
	w.waitFor(t, id, status("sent"))
}

// Domains added before names were claimed across accounts may share a name.
// Their events reach the identities process manager as they are: the
// second account's add and removal leave the first account's identity, key
// and owner as they were, and nothing is poisoned or retried forever.
func TestSESIdentitiesOfOldDuplicateDomains(t *testing.T) {
	s, fake, _ := newSESDomainWorld(t)
	ctx := context.Background()
	acctA, _ := s.Account("A")
	acctB, _ := s.Account("B")
	now := s.Clock.Now()
	meta := eventstore.Metadata{Actor: "operator"}
	appendEvents := func(stream string, evs []domain.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		data, err := codec.EncodeAll(evs, meta)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Store.Append(ctx, stream, eventstore.Any, data...); err != nil {
			t.Fatal(err)
		}
	}
	addDomain := func(acct, name string) string {
		t.Helper()
		id := uuid.NewString()
		k, err := dkimkey.Generate(s.Box, id, now)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := sendingdomain.Add(sendingdomain.State{}, id, acct, name, "us-east-1", &k, nil, now)
		appendEvents(sendingdomain.Stream(id), evs, err)
		return id
	}

	idA := addDomain(acctA, "victim.com")
	waitIdentity(t, fake, "victim.com")
	keyA := activeKey(t, s, idA)
	idB := addDomain(acctB, "victim.com")
	stB, err := s.Commands.Domain(ctx, idB)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sendingdomain.Remove(stB, acctB, now)
	appendEvents(sendingdomain.Stream(idB), evs, err)
	addDomain(acctB, "barrier.example")
	waitIdentity(t, fake, "barrier.example")

	got, ok := fake.Identity("victim.com")
	if !ok || got.Tags[ses.OwnerTag] != idA || got.PrivateKey != keyA {
		t.Fatalf("A's identity after B's add and removal: present=%v tags=%v same key=%v", ok, got.Tags, got.PrivateKey == keyA)
	}
	if n := identityChanges(fake, "victim.com"); n["create"] != 1 || n["delete"] != 0 || n["set_signing_key"] != 0 {
		t.Fatalf("changes to A's identity: %v", n)
	}
	var poisoned int
	if err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM processmanager_poison").Scan(&poisoned); err != nil || poisoned != 0 {
		t.Fatalf("poisoned events: %d %v", poisoned, err)
	}
}

// Two accounts adding one name at the same moment: one gets it.
func TestDomainNameRaceAcrossAccounts(t *testing.T) {
	w := newDNSWorld(t)
	_, other := w.Account("Other")
	for i := range 5 {
		name := fmt.Sprintf("race%d.example", i)
		codes := make([]int, 2)
		var wg sync.WaitGroup
		for j, token := range []string{w.admin, other} {
			wg.Go(func() {
				codes[j] = w.Do("POST", "/api/domains", token, map[string]any{"domain": name}).Status
			})
		}
		wg.Wait()
		slices.Sort(codes)
		if fmt.Sprint(codes) != "[201 409]" {
			t.Fatalf("%s: statuses %v, want one 201 and one 409", name, codes)
		}
		var n int
		if err := w.Pool.QueryRow(context.Background(), "SELECT count(*) FROM domains WHERE name = $1", name).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: %d domains (%v)", name, n, err)
		}
	}
}

// A domain whose verification window expired frees its name (and its
// provider identity) for other accounts; its verify then meets the new
// holder, until that one is removed.
func TestExpiredDomainFreesTheName(t *testing.T) {
	w := newDNSWorld(t)
	_, adminB := w.Account("Other")
	ids := w.Identities.(*sandbox.Identities)
	ownerOf := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			id, ok := ids.Identity("late.example")
			if (want == "" && !ok) || (ok && id.DomainID == want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("identity of late.example: %+v (present %v), want owner %q; calls %+v", id, ok, want, ids.Calls())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	d := w.add(t, "late.example")
	idA := d["id"].(string)
	ownerOf(idA)
	wantProblem(t, w.Do("POST", "/api/domains", adminB, map[string]any{"domain": "late.example"}), 409, "domain_unavailable")

	w.Clock.Advance(73 * time.Hour)
	w.tick(t)
	if g := w.get(t, idA); g["status"] != "failed" {
		t.Fatalf("not expired: %s", statuses(g))
	}
	ownerOf("") // the expired domain gave its identity up
	wantProblem(t, w.Do("POST", "/api/domains", w.admin, map[string]any{"domain": "late.example"}), 409, "domain_exists")

	r := w.Do("POST", "/api/domains", adminB, map[string]any{"domain": "late.example"})
	if r.Status != 201 {
		t.Fatalf("another account adding an expired name: %d %s", r.Status, r.Body)
	}
	idB := r.JSON(t)["id"].(string)
	ownerOf(idB)

	// A's verify meets B's claim, and changes nothing.
	publish(t, d, w.a, w.b)
	wantProblem(t, w.Do("POST", "/api/domains/"+idA+"/verify", w.admin, nil), 409, "domain_unavailable")
	if g := w.get(t, idA); g["status"] != "failed" {
		t.Fatalf("refused verify changed the domain: %s", statuses(g))
	}
	ownerOf(idB)

	// Once B removes its domain, A verifies again and gets its identity back.
	if r := w.Do("DELETE", "/api/domains/"+idB, adminB, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if v := w.verify(t, idA); v["status"] != "verified" {
		t.Fatalf("verify after the name came back: %s", statuses(v))
	}
	ownerOf(idA)
	wantProblem(t, w.Do("POST", "/api/domains", adminB, map[string]any{"domain": "late.example"}), 409, "domain_unavailable")
}

// keysGenerated reads mailroom_dkim_keys_generated_total from /metrics.
func keysGenerated(t *testing.T, s *apptest.Server) int {
	t.Helper()
	body := string(s.Do("GET", "/metrics", "", nil).Body)
	m := regexp.MustCompile(`(?m)^mailroom_dkim_keys_generated_total (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("/metrics has no mailroom_dkim_keys_generated_total")
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// Key changes of unknown or foreign domains, and adds of names in use, are
// refused before any key is made.
func TestRefusedKeyChangesMakeNoKeys(t *testing.T) {
	w := newDNSWorld(t)
	_, other := w.Account("Other")
	before := keysGenerated(t, w.Server)
	d := w.add(t, "mine.example")
	if n := keysGenerated(t, w.Server); n != before+1 {
		t.Fatalf("an add made %d keys, want 1", n-before)
	}
	before++

	for range 100 {
		wantProblem(t, w.Do("POST", "/api/domains/"+uuid.NewString()+"/upgrade", w.member, nil), 404, "not_found")
	}
	for range 20 {
		wantProblem(t, w.Do("POST", "/api/domains/"+uuid.NewString()+"/rotate", w.admin, nil), 404, "not_found")
	}
	wantProblem(t, w.Do("POST", "/api/domains/"+d["id"].(string)+"/upgrade", other, nil), 404, "not_found")
	wantProblem(t, w.Do("POST", "/api/domains/"+d["id"].(string)+"/rotate", other, nil), 404, "not_found")
	wantProblem(t, w.Do("POST", "/api/domains/"+d["id"].(string)+"/upgrade", w.admin, nil), 409, "already_byodkim")
	wantProblem(t, w.Do("POST", "/api/domains", other, map[string]any{"domain": "mine.example"}), 409, "domain_unavailable")
	wantProblem(t, w.Do("POST", "/api/domains", w.admin, map[string]any{"domain": "mine.example"}), 409, "domain_exists")
	if n := keysGenerated(t, w.Server); n != before {
		t.Fatalf("refused requests made %d keys", n-before)
	}
}

// An account holds at most sendingdomain.MaxDomains domains; removing one
// makes room, and other accounts are not affected.
func TestDomainCap(t *testing.T) {
	w := newDNSWorld(t)
	ctx := context.Background()
	acct := accountOf(t, w)
	var first string
	for i := range sendingdomain.MaxDomains {
		st, err := w.Commands.ImportLegacyDomain(ctx, acct, fmt.Sprintf("d%03d.example", i), commands.Meta{Actor: "operator"})
		if err != nil {
			t.Fatalf("domain %d: %v", i, err)
		}
		if first == "" {
			first = st.ID
		}
	}
	before := keysGenerated(t, w.Server)
	r := w.Do("POST", "/api/domains", w.admin, map[string]any{"domain": "one-more.example"})
	wantProblem(t, r, 422, "limit_exceeded")
	if !strings.Contains(string(r.Body), strconv.Itoa(sendingdomain.MaxDomains)) {
		t.Errorf("the refusal does not name the limit: %s", r.Body)
	}
	if n := keysGenerated(t, w.Server); n != before {
		t.Fatalf("a refused add made %d keys", n-before)
	}
	_, other := w.Account("Other")
	if r := w.Do("POST", "/api/domains", other, map[string]any{"domain": "one-more.example"}); r.Status != 201 {
		t.Fatalf("another account: %d %s", r.Status, r.Body)
	}
	if r := w.Do("DELETE", "/api/domains/"+first, w.admin, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	w.add(t, "room-again.example")
}
