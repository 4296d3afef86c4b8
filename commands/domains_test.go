package commands_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/projections"
)

func TestAddDomainClaimsTheNameAndMakesAKey(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.waitedFor()

	st, err := h.svc.AddDomain(ctx, acct, " Mail.Example.COM. ", meta)
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "mail.example.com" || st.AccountID != acct || st.Status != sendingdomain.StatusPending ||
		st.Mode != sendingdomain.BYODKIM || st.Region != "eu-west-1" || st.Active == nil ||
		!st.Deadline.Equal(start.Add(sendingdomain.VerificationWindow)) {
		t.Fatalf("added %+v", st)
	}
	if _, err := dkimkey.Open(h.box, st.ID, *st.Active); err != nil {
		t.Fatalf("the sealed key does not open for its domain: %v", err)
	}
	if h.keysGenerated() != 1 {
		t.Fatalf("%d keys made, want 1", h.keysGenerated())
	}
	claim := only[*sendingdomain.NameClaimed](t, h, sendingdomain.NameStream("mail.example.com"))
	if claim.DomainID != st.ID || claim.AccountID != acct {
		t.Fatalf("claim %+v for domain %s", claim, st.ID)
	}
	added := only[*sendingdomain.Added](t, h, sendingdomain.Stream(st.ID))
	if added.Name != st.Name || added.Key == nil || added.Key.PublicKey != st.Active.PublicKey {
		t.Fatalf("added event %+v", added)
	}
	if loaded, err := h.svc.Domain(ctx, st.ID); err != nil || loaded.Name != st.Name {
		t.Fatalf("domain %s loads as %+v, %v", st.ID, loaded, err)
	}
	if w := h.waitedFor(); !slices.Equal(w, []projections.Name{projections.DomainsName}) {
		t.Errorf("waited for %q, want the domains projection", w)
	}
}

func TestAddDomainRefusesANameInUse(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	first, err := h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta)
	if err != nil {
		t.Fatal(err)
	}
	h.appended(t)

	_, err = h.svc.AddDomain(ctx, acct, "EXAMPLE.com", meta)
	wantConflict(t, err, "domain_exists")
	_, err = h.svc.AddDomain(ctx, other, "example.com", meta)
	wantConflict(t, err, sendingdomain.ErrUnavailable.Code)
	h.nothingAppended(t, "refused adds")
	if h.keysGenerated() != 0 {
		t.Fatal("a key was made for a name in use")
	}

	// Removing the domain frees its name for any account.
	if err := h.svc.RemoveDomain(ctx, acct, first.ID, meta); err != nil {
		t.Fatal(err)
	}
	if got := h.types(t, sendingdomain.NameStream("example.com")); !slices.Equal(got, []string{"DomainNameClaimed", "DomainNameReleased"}) {
		t.Fatalf("name stream %q", got)
	}
	if _, err := h.svc.ImportLegacyDomain(ctx, other, "example.com", meta); err != nil {
		t.Fatalf("add after removal: %v", err)
	}
}

func TestAddDomainRefusesInvalidNames(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.appended(t)
	for _, name := range []string{"", "localhost", "192.0.2.1", "exa mple.com", "-bad.example.com"} {
		_, err := h.svc.AddDomain(ctx, acct, name, meta)
		if got := fields(t, err); !slices.Equal(got, []string{"domain"}) {
			t.Errorf("add %q: fields %q, want domain", name, got)
		}
	}
	h.nothingAppended(t, "refused adds")
}

func TestAddDomainStopsAtTheAccountsLimit(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(d *commands.Deps) {
		d.DomainCount = func(context.Context, string) (int, error) { return sendingdomain.MaxDomains, nil }
	})
	acct := h.newAccount(t)
	h.appended(t)
	_, err := h.svc.AddDomain(ctx, acct, "example.com", meta)
	wantLimit(t, err)
	h.nothingAppended(t, "a refused add")
}

func TestImportLegacyDomainNeedsTheAccount(t *testing.T) {
	h := newHarness(t)
	_, err := h.svc.ImportLegacyDomain(context.Background(), "f3c5d3b2-5b0e-4d0e-9d43-1d7d3f0f7a11", "example.com", meta)
	if !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("import for no account: %v, want not found", err)
	}
}

func TestRemoveDomainOfAnotherAccountIsNotFound(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	id := h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	for _, c := range []struct{ account, id string }{{other, id}, {acct, "not-an-id"}} {
		if err := h.svc.RemoveDomain(ctx, c.account, c.id, meta); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("remove %s as %s: %v, want not found", c.id, c.account, err)
		}
	}
	h.nothingAppended(t, "refused removals")
}

// publish serves records on a DNS server, as a registrar would.
func publish(dns *dnstest.Server, records []sendingdomain.Record) {
	for _, r := range records {
		dns.Add(dnscheck.Record{Type: r.Type, Name: r.Name, Value: r.Value, Priority: r.Priority})
	}
}

func TestVerifyDomainNeedsTheRecordsAndTheProvider(t *testing.T) {
	ctx := context.Background()
	dns := dnstest.Start(t)
	providerSees := false
	h := newHarness(t, func(d *commands.Deps) {
		d.DNS = dnscheck.New([]string{dns.Addr()}, time.Second)
		d.Identity = func(context.Context, string, string) (bool, bool, error) { return providerSees, providerSees, nil }
	})
	acct := h.newAccount(t)
	st, err := h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta)
	if err != nil {
		t.Fatal(err)
	}
	verify := func() (sendingdomain.State, commands.DNSCheck) {
		t.Helper()
		st, report, err := h.svc.VerifyDomain(ctx, acct, st.ID, meta)
		if err != nil {
			t.Fatal(err)
		}
		return st, report
	}

	got, report := verify()
	if got.Status != sendingdomain.StatusPending || report.OK || len(report.Results) != 1 || report.Results[0].OK {
		t.Fatalf("nothing published: %s, report %+v", got.Status, report)
	}
	publish(dns, st.Records())
	got, report = verify()
	if got.Status != sendingdomain.StatusPending || !report.OK {
		t.Fatalf("published, the provider not seeing it: %s, report %+v", got.Status, report)
	}
	providerSees = true
	if got, _ = verify(); got.Status != sendingdomain.StatusVerified {
		t.Fatalf("published, the provider seeing it: %s", got.Status)
	}
	want := []string{"DomainAdded", "DomainDnsChecked", "DomainDnsChecked", "DomainDnsChecked", "DomainVerified"}
	if got := h.types(t, sendingdomain.Stream(st.ID)); !slices.Equal(got, want) {
		t.Fatalf("domain stream %q, want %q", got, want)
	}
	if _, _, err := h.svc.VerifyDomain(ctx, h.newAccount(t), st.ID, meta); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("verify by another account: %v, want not found", err)
	}
}

// An add that gives up while it waits for its turn to make a key (its
// client went away) has claimed nothing: adding the name again succeeds.
func TestAnAddGivenUpWaitingForItsKeyClaimsNothing(t *testing.T) {
	ctx := context.Background()
	making, finish := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := newHarness(t, func(d *commands.Deps) {
		d.KeyGenerated = func() { // called within the key's turn: holds it
			once.Do(func() {
				close(making)
				<-finish
			})
		}
	})
	acct := h.newAccount(t)
	first := make(chan error, 1)
	go func() {
		_, err := h.svc.AddDomain(ctx, acct, "one.example.com", meta)
		first <- err
	}()
	<-making
	gaveUp, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h.svc.AddDomain(gaveUp, acct, "two.example.com", meta); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an add waiting for its turn past its deadline: %v", err)
	}
	close(finish)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.AddDomain(ctx, acct, "two.example.com", meta); err != nil {
		t.Fatalf("adding the name again: %v", err)
	}
}

// During an upgrade, a resolver that does not return the new key's record
// is not ok, though it returns the legacy CNAMEs the domain verifies with;
// once every resolver returns it, the check is ok and the key cuts over.
func TestVerifyDuringAnUpgradeNeedsTheNewKeyOnEveryResolver(t *testing.T) {
	ctx := context.Background()
	a, b := dnstest.Start(t), dnstest.Start(t)
	h := newHarness(t, func(d *commands.Deps) {
		d.DNS = dnscheck.New([]string{a.Addr(), b.Addr()}, time.Second)
	})
	acct := h.newAccount(t)
	id := h.verifiedDomain(t, acct, "example.com")
	st, err := h.svc.UpgradeDKIM(ctx, acct, id, meta)
	if err != nil {
		t.Fatal(err)
	}
	newKey, ok := st.PendingKeyRecord()
	if !ok {
		t.Fatalf("no key awaiting DNS after the upgrade: %+v", st.Transition)
	}
	publish(a, st.Records())
	for _, r := range st.Records() {
		if r.Name != newKey.Name {
			publish(b, []sendingdomain.Record{r})
		}
	}

	got, report, err := h.svc.VerifyDomain(ctx, acct, id, meta)
	if err != nil {
		t.Fatal(err)
	}
	if report.OK || !report.Results[0].OK || report.Results[1].OK {
		t.Fatalf("the new key on one resolver: report %+v", report)
	}
	if got.Status != sendingdomain.StatusVerified || !got.DkimOK || got.Mode != sendingdomain.Legacy ||
		got.Transition == nil || got.Transition.State != sendingdomain.AwaitingDNS {
		t.Fatalf("the new key on one resolver: %s dkim=%v mode %v transition %+v", got.Status, got.DkimOK, got.Mode, got.Transition)
	}

	publish(b, []sendingdomain.Record{newKey})
	got, report, err = h.svc.VerifyDomain(ctx, acct, id, meta)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK || !report.Results[0].OK || !report.Results[1].OK {
		t.Fatalf("the new key on both resolvers: report %+v", report)
	}
	if got.Status != sendingdomain.StatusVerified || got.Mode != sendingdomain.BYODKIM ||
		got.Transition == nil || got.Transition.State != sendingdomain.CutOver {
		t.Fatalf("the new key on both resolvers: %s mode %v transition %+v", got.Status, got.Mode, got.Transition)
	}
}

// A legacy domain's CNAME records are named after 32-character tokens:
// a name too long for them is refused at import, as a BYODKIM name too
// long for its DKIM record is at add.
func TestImportLegacyDomainRefusesANameItsRecordsCannotFollow(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	name := func(n int) string { // n characters, labels of at most 63
		var labels []string
		for n > 0 {
			l := min(n, 62)
			if n-l == 1 { // no empty label after the dot
				l--
			}
			labels = append(labels, strings.Repeat("a", l))
			n -= l + 1
		}
		return strings.Join(labels, ".") + ".com"
	}
	long := name(sendingdomain.MaxLegacyNameLength - 3) // + ".com" makes one over
	if len(long) != sendingdomain.MaxLegacyNameLength+1 {
		t.Fatalf("test name of %d characters", len(long))
	}
	h.appended(t)
	var v *domain.ValidationError
	if _, err := h.svc.ImportLegacyDomain(ctx, acct, long, meta); !errors.As(err, &v) || v.Errors[0].Field != "domain" {
		t.Fatalf("import of a %d-character legacy name: %v", len(long), err)
	}
	h.nothingAppended(t, "a refused import")
	st, err := h.svc.ImportLegacyDomain(ctx, acct, long[1:], meta)
	if err != nil {
		t.Fatalf("import of a %d-character legacy name: %v", len(long)-1, err)
	}
	for _, r := range st.Records() {
		if len(r.Name) > 253 {
			t.Errorf("record name of %d characters: %s", len(r.Name), r.Name)
		}
	}
}

// hookDNS runs after, once, when its checker has answered: something that
// happens while a check's answers are on their way back.
type hookDNS struct {
	inner commands.DNSChecker
	after func()
}

func (h *hookDNS) Check(ctx context.Context, rs []dnscheck.Record) dnscheck.Result {
	res := h.inner.Check(ctx, rs)
	if f := h.after; f != nil {
		h.after = nil
		f()
	}
	return res
}

// A verify whose lookups were of the key a rotation then replaced is not
// recorded on the replaced key: it looks again, and the new key, not
// published, leaves the domain pending.
func TestVerifyOvertakenByARotationJudgesTheNewKey(t *testing.T) {
	ctx := context.Background()
	srv := dnstest.Start(t)
	hd := &hookDNS{inner: dnscheck.New([]string{srv.Addr()}, time.Second)}
	h := newHarness(t, func(d *commands.Deps) { d.DNS = hd })
	acct := h.newAccount(t)
	st, err := h.svc.AddDomain(ctx, acct, "example.com", meta)
	if err != nil {
		t.Fatal(err)
	}
	oldSel := st.Active.Selector
	publish(srv, st.Records()) // the OLD key's record and MAIL FROM are published
	var rotated sendingdomain.State
	hd.after = func() {
		var err error
		if rotated, err = h.svc.RotateDKIM(ctx, acct, st.ID, meta); err != nil {
			t.Errorf("rotate: %v", err)
		}
	}
	got, report, err := h.svc.VerifyDomain(ctx, acct, st.ID, meta)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Active == nil || rotated.Active.Selector == oldSel {
		t.Fatalf("rotation did not replace the key: %+v", rotated.Active)
	}
	if got.Status != sendingdomain.StatusPending || got.Active.Selector != rotated.Active.Selector || report.OK {
		t.Errorf("after verify: status %s, key %s (old %s, new %s), report ok %v; want pending with the new key, not ok",
			got.Status, got.Active.Selector, oldSel, rotated.Active.Selector, report.OK)
	}
	// The background poll's check, overtaken the same way, records nothing.
	publish(srv, got.Records())
	hd.after = func() {
		if rotated, err = h.svc.RotateDKIM(ctx, acct, st.ID, meta); err != nil {
			t.Errorf("rotate: %v", err)
		}
	}
	if got, _, err = h.svc.RecheckDomain(ctx, st.ID, meta); err != nil || got.Status != sendingdomain.StatusPending {
		t.Errorf("recheck overtaken by a rotation: %s, %v; want pending", got.Status, err)
	}
	publish(srv, rotated.Records())
	if got, _, err = h.svc.VerifyDomain(ctx, acct, st.ID, meta); err != nil || got.Status != sendingdomain.StatusVerified {
		t.Errorf("verify with the new key published: %s, %v", got.Status, err)
	}
}

// Releasing a name refuses a domain that was verified after the release
// read the name's domains: verifying shows the name is its account's.
func TestReleaseLeavesADomainVerifiedMeanwhile(t *testing.T) {
	ctx := context.Background()
	var h *harness
	var meanwhile func()
	h = newHarness(t, func(d *commands.Deps) {
		d.DomainsNamed = func(ctx context.Context, name string) ([]sendingdomain.State, error) {
			out, err := h.domainsNamed(ctx, name)
			if f := meanwhile; f != nil {
				meanwhile = nil
				f()
			}
			return out, err
		}
	})
	acct := h.newAccount(t)
	st, err := h.svc.AddDomain(ctx, acct, "example.com", meta)
	if err != nil {
		t.Fatal(err)
	}
	meanwhile = func() {
		if err := h.svc.VerifyDomainBySandbox(ctx, st.ID, meta); err != nil {
			t.Errorf("verify: %v", err)
		}
	}
	_, err = h.svc.ReleaseDomainName(ctx, "example.com", meta)
	var conflict *domain.ConflictError
	if !errors.As(err, &conflict) || conflict.Code != "domain_verified" {
		t.Errorf("release of a name verified meanwhile: %v; want domain_verified", err)
	}
	if got, err := h.svc.Domain(ctx, st.ID); err != nil || got.Removed || got.Status != sendingdomain.StatusVerified {
		t.Errorf("the domain after the release: removed %v, status %s, %v; want verified and kept", got.Removed, got.Status, err)
	}
}

// A domain's addition is dated after its name's claim, which comes first
// in the log (the key made between them can take a while).
func TestDomainAddedIsDatedAfterItsClaim(t *testing.T) {
	ctx := context.Background()
	var h *harness
	h = newHarness(t, func(d *commands.Deps) {
		d.Now = func() time.Time { h.clock.Advance(time.Millisecond); return h.clock.Now() }
	})
	acct := h.newAccount(t)
	st, err := h.svc.AddDomain(ctx, acct, "example.com", meta)
	if err != nil {
		t.Fatal(err)
	}
	_, claims := h.stream(t, sendingdomain.NameStream("example.com"))
	_, added := h.stream(t, sendingdomain.Stream(st.ID))
	claimed, addition := claims[len(claims)-1].(*sendingdomain.NameClaimed), added[0].(*sendingdomain.Added)
	if addition.AddedAt.Before(claimed.ClaimedAt) {
		t.Errorf("DomainAdded at %s, before its DomainNameClaimed at %s", addition.AddedAt, claimed.ClaimedAt)
	}
}

// A verify whose domain the poller expires while its lookups run must claim
// the name again before it restarts the window, as a verify of a domain
// expired already does: an account that took the name meanwhile keeps it,
// and the verify is refused; a name nobody took is claimed again.
func TestAVerifyOverlappingItsDomainsExpiryClaimsTheNameBeforeRestarting(t *testing.T) {
	ctx := context.Background()
	srv := dnstest.Start(t)
	hd := &hookDNS{inner: dnscheck.New([]string{srv.Addr()}, time.Second)}
	h := newHarness(t, func(d *commands.Deps) { d.DNS = hd })
	acct, other := h.newAccount(t), h.newAccount(t)
	taken := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "taken.example.com", meta))
	kept := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "kept.example.com", meta))
	h.clock.Advance(sendingdomain.VerificationWindow) // due, not yet expired by the poller

	var theirs sendingdomain.State
	hd.after = func() { // while the verify's lookups run
		if err := h.svc.ExpireDomain(ctx, taken.ID, meta); err != nil {
			t.Errorf("expire: %v", err)
		}
		var err error
		if theirs, err = h.svc.ImportLegacyDomain(ctx, other, "taken.example.com", meta); err != nil {
			t.Errorf("the other account's add of the expired name: %v", err)
		}
	}
	_, _, err := h.svc.VerifyDomain(ctx, acct, taken.ID, meta)
	wantConflict(t, err, sendingdomain.ErrUnavailable.Code)
	if got := must[sendingdomain.State](t)(h.svc.Domain(ctx, taken.ID)); got.Status != sendingdomain.StatusFailed {
		t.Errorf("the refused verify's domain is %s, want failed", got.Status)
	}
	if got := must[sendingdomain.State](t)(h.svc.Domain(ctx, theirs.ID)); got.Status != sendingdomain.StatusPending {
		t.Errorf("the other account's domain is %s, want pending", got.Status)
	}

	hd.after = func() {
		if err := h.svc.ExpireDomain(ctx, kept.ID, meta); err != nil {
			t.Errorf("expire: %v", err)
		}
	}
	got, _, err := h.svc.VerifyDomain(ctx, acct, kept.ID, meta)
	if err != nil || got.Status != sendingdomain.StatusPending || !got.Deadline.Equal(h.clock.Now().Add(sendingdomain.VerificationWindow)) {
		t.Fatalf("verify of a domain expired during its lookups: %s until %s, %v; want pending for another window", got.Status, got.Deadline, err)
	}
	_, claims := h.stream(t, sendingdomain.NameStream("kept.example.com"))
	if last, ok := claims[len(claims)-1].(*sendingdomain.NameClaimed); len(claims) != 2 || !ok || last.DomainID != kept.ID {
		t.Errorf("name stream %v; want a second claim by the restarted domain", claims)
	}
	_, err = h.svc.ImportLegacyDomain(ctx, other, "kept.example.com", meta)
	wantConflict(t, err, sendingdomain.ErrUnavailable.Code)
}

// The window is over at its deadline, whether or not the poller has marked
// the domain failed yet: a verify then starts another one, and the poll
// that follows leaves the domain pending.
func TestAVerifyPastTheDeadlineRestartsTheWindowBeforeThePollerExpiresIt(t *testing.T) {
	ctx := context.Background()
	srv := dnstest.Start(t)
	h := newHarness(t, func(d *commands.Deps) { d.DNS = dnscheck.New([]string{srv.Addr()}, time.Second) })
	acct := h.newAccount(t)
	st := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta))
	h.clock.Advance(sendingdomain.VerificationWindow + time.Second)

	got, _, err := h.svc.VerifyDomain(ctx, acct, st.ID, meta)
	if err != nil || got.Status != sendingdomain.StatusPending || !got.Deadline.Equal(h.clock.Now().Add(sendingdomain.VerificationWindow)) {
		t.Fatalf("verify past the deadline: %s until %s, %v; want pending until %s", got.Status, got.Deadline, err, h.clock.Now().Add(sendingdomain.VerificationWindow))
	}
	if err := h.svc.ExpireDomain(ctx, st.ID, meta); err != nil {
		t.Fatal(err)
	}
	if got := must[sendingdomain.State](t)(h.svc.Domain(ctx, st.ID)); got.Status != sendingdomain.StatusPending {
		t.Errorf("after the poll: %s, want pending", got.Status)
	}
}

// A rotation or upgrade is dated when its event is recorded, after its key
// was made, as an add is: making the key (in the account's turn) can take
// a while, and an event recorded on the domain meanwhile must not come
// earlier in the stream with a later time.
func TestAKeyChangeIsDatedAfterItsKeyIsMade(t *testing.T) {
	ctx := context.Background()
	var h *harness
	h = newHarness(t, func(d *commands.Deps) {
		d.KeyGenerated = func() { h.clock.Advance(time.Hour) } // a key long in the making
	})
	acct := h.newAccount(t)
	st := must[sendingdomain.State](t)(h.svc.AddDomain(ctx, acct, "rotated.example.com", meta))
	before := h.clock.Now()
	must[sendingdomain.State](t)(h.svc.RotateDKIM(ctx, acct, st.ID, meta))
	replaced := last[*sendingdomain.KeyReplaced](t, h, sendingdomain.Stream(st.ID))
	if replaced.ReplacedAt.Before(before.Add(time.Hour)) || replaced.Key.CreatedAt.After(replaced.ReplacedAt) {
		t.Errorf("rotation asked at %s, its key done an hour later: key created %s, DkimKeyReplaced at %s",
			before, replaced.Key.CreatedAt, replaced.ReplacedAt)
	}

	legacy := h.verifiedDomain(t, acct, "upgraded.example.com")
	before = h.clock.Now()
	must[sendingdomain.State](t)(h.svc.UpgradeDKIM(ctx, acct, legacy, meta))
	started := last[*sendingdomain.KeyChangeStarted](t, h, sendingdomain.Stream(legacy))
	if started.StartedAt.Before(before.Add(time.Hour)) || started.Key.CreatedAt.After(started.StartedAt) {
		t.Errorf("upgrade asked at %s, its key done an hour later: key created %s, DkimKeyChangeStarted at %s",
			before, started.Key.CreatedAt, started.StartedAt)
	}
}

// last returns the last event of a stream as a T.
func last[T domain.Event](t *testing.T, h *harness, name string) T {
	t.Helper()
	_, evs := h.stream(t, name)
	if len(evs) == 0 {
		t.Fatalf("%s is empty", name)
	}
	e, ok := evs[len(evs)-1].(T)
	if !ok {
		t.Fatalf("%s ends with %T, want %T", name, evs[len(evs)-1], e)
	}
	return e
}

// The operator's release removes every domain that holds a name without
// having verified it, whichever account added it, and frees the name. A
// name its holder verified is refused, and a name nobody holds is not found.
func TestReleaseDomainNameRemovesEveryUnverifiedHolder(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other, owner := h.newAccount(t), h.newAccount(t), h.newAccount(t)
	first := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta))
	// A domain added before names were claimed holds the name too.
	old := uuid.NewString()
	h.appendEvent(t, sendingdomain.Stream(old), &sendingdomain.Added{DomainID: old, AccountID: other, Name: "example.com",
		Region: "eu-west-1", MailFromDomain: sendingdomain.MailFromHost("example.com"), DkimMode: sendingdomain.Legacy,
		LegacyTokens: []string{"a", "b", "c"}, AddedAt: start, Deadline: start.Add(sendingdomain.VerificationWindow)})
	verifiedID := h.verifiedDomain(t, owner, "example.net")
	h.appended(t)

	if _, err := h.svc.ReleaseDomainName(ctx, "exa mple.com", meta); !slices.Equal(fields(t, err), []string{"domain"}) {
		t.Errorf("release of an invalid name: %v, want an error on domain", err)
	}
	if _, err := h.svc.ReleaseDomainName(ctx, "example.org", meta); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("release of a name nobody holds: %v, want not found", err)
	}
	_, err := h.svc.ReleaseDomainName(ctx, "example.net", meta)
	wantConflict(t, err, "domain_verified")
	h.nothingAppended(t, "refused releases")
	if got, err := h.svc.Domain(ctx, verifiedID); err != nil || got.Removed {
		t.Errorf("the verified domain after a refused release: removed %v, %v", got.Removed, err)
	}

	released, err := h.svc.ReleaseDomainName(ctx, " Example.COM ", meta)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range released {
		ids = append(ids, st.ID)
	}
	if want := []string{first.ID, old}; !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("released %q, want both holders %q", ids, want)
	}
	for _, id := range ids {
		if got, err := h.svc.Domain(ctx, id); err != nil || !got.Removed {
			t.Errorf("domain %s after the release: removed %v, %v; want removed", id, got.Removed, err)
		}
	}
	if _, err := h.svc.ImportLegacyDomain(ctx, owner, "example.com", meta); err != nil {
		t.Fatalf("add of the released name by a third account: %v", err)
	}
}

// A name's claim keeps the name for its pending domain past the claim's
// grace, though the read model does not show the domain yet: another add
// of the name, by any account, is refused and records nothing.
func TestAClaimKeepsItsNameForItsPendingDomainPastItsGrace(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(d *commands.Deps) {
		d.DomainsNamed = func(context.Context, string) ([]sendingdomain.State, error) { return nil, nil } // behind
	})
	acct, other := h.newAccount(t), h.newAccount(t)
	if _, err := h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(sendingdomain.ClaimGrace)
	h.appended(t)

	_, err := h.svc.ImportLegacyDomain(ctx, other, "example.com", meta)
	wantConflict(t, err, sendingdomain.ErrUnavailable.Code)
	_, err = h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta)
	wantConflict(t, err, "domain_exists")
	h.nothingAppended(t, "refused adds")
}

// A domain is verified once every resolver shows its DKIM and MAIL FROM
// records, with or without its DMARC record, which the check reports on its
// own. Without its MAIL FROM records it stays pending, whatever else is
// published.
func TestVerifyDomainNeedsItsMailFromRecordsAndNotItsDMARC(t *testing.T) {
	ctx := context.Background()
	dns := dnstest.Start(t)
	h := newHarness(t, func(d *commands.Deps) { d.DNS = dnscheck.New([]string{dns.Addr()}, time.Second) })
	acct := h.newAccount(t)
	publishAllBut := func(st sendingdomain.State, group string) {
		publish(dns, slices.DeleteFunc(st.Records(), func(r sendingdomain.Record) bool { return r.Group == group }))
	}

	noMailFrom := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta))
	publishAllBut(noMailFrom, sendingdomain.GroupMailFrom)
	got, report, err := h.svc.VerifyDomain(ctx, acct, noMailFrom.ID, meta)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != sendingdomain.StatusPending || report.OK || !got.DkimOK || got.MailFromOK || !got.LastCheck.DmarcOK {
		t.Errorf("without MAIL FROM records: %s, report ok %v, dkim %v, mail from %v, dmarc %v; want pending with only mail from missing",
			got.Status, report.OK, got.DkimOK, got.MailFromOK, got.LastCheck.DmarcOK)
	}

	noDMARC := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "example.net", meta))
	publishAllBut(noDMARC, sendingdomain.GroupDMARC)
	got, report, err = h.svc.VerifyDomain(ctx, acct, noDMARC.ID, meta)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != sendingdomain.StatusVerified || !report.OK || got.LastCheck.DmarcOK {
		t.Errorf("without a DMARC record: %s, report ok %v, dmarc %v; want verified, dmarc reported missing",
			got.Status, report.OK, got.LastCheck.DmarcOK)
	}

	// A subdomain without a DMARC record of its own is covered by its
	// organisational domain's, as receivers read it.
	sub := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "mail.example.org", meta))
	publishAllBut(sub, sendingdomain.GroupDMARC)
	dns.Add(dnscheck.Record{Type: "TXT", Name: "_dmarc.example.org", Value: "v=DMARC1; p=reject"})
	got, _, err = h.svc.VerifyDomain(ctx, acct, sub.ID, meta)
	if err != nil {
		t.Fatal(err)
	}
	row := got.LastCheck.Servers[0].Records[len(got.LastCheck.Servers[0].Records)-1]
	if !got.LastCheck.DmarcOK || row.Name != "_dmarc.mail.example.org" || !row.OK ||
		row.Reason != "none at this name; the policy at _dmarc.example.org applies to it" {
		t.Errorf("a subdomain under an organisational DMARC policy: dmarc %v, row %+v", got.LastCheck.DmarcOK, row)
	}
}

// A removal the read models do not show in time answers ErrNotVisible, and
// so does its repeat until they show it; then the domain is gone. Another
// account's repeat is not found at once: it learns nothing of the domain.
func TestRemoveDomainNotVisibleInTime(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	id := h.verifiedDomain(t, acct, "example.com")
	h.setVisible(false)
	if err := h.svc.RemoveDomain(ctx, acct, id, meta); !errors.Is(err, commands.ErrNotVisible) {
		t.Fatalf("a removal the read models do not show: %v, want ErrNotVisible", err)
	}
	if got := h.types(t, sendingdomain.Stream(id)); got[len(got)-1] != "DomainRemoved" {
		t.Fatalf("domain stream %q: the removal must be recorded", got)
	}
	h.appended(t)
	if err := h.svc.RemoveDomain(ctx, acct, id, meta); !errors.Is(err, commands.ErrNotVisible) {
		t.Errorf("the retry, still not visible: %v, want ErrNotVisible", err)
	}
	if err := h.svc.RemoveDomain(ctx, other, id, meta); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another account's removal: %v, want not found", err)
	}
	h.setVisible(true)
	if err := h.svc.RemoveDomain(ctx, acct, id, meta); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("the retry once visible: %v, want not found", err)
	}
	h.nothingAppended(t, "repeated removals")
}

// A domain expired already gave its name up: a verify claims the name again
// before it restarts the window. An account that took the name meanwhile
// keeps it, and the verify is refused; a name nobody took is claimed again.
func TestAVerifyOfAnExpiredDomainClaimsTheNameBeforeRestarting(t *testing.T) {
	ctx := context.Background()
	srv := dnstest.Start(t)
	h := newHarness(t, func(d *commands.Deps) { d.DNS = dnscheck.New([]string{srv.Addr()}, time.Second) })
	acct, other := h.newAccount(t), h.newAccount(t)
	taken := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "taken.example.com", meta))
	kept := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, acct, "kept.example.com", meta))
	h.clock.Advance(sendingdomain.VerificationWindow)
	for _, id := range []string{taken.ID, kept.ID} {
		if err := h.svc.ExpireDomain(ctx, id, meta); err != nil {
			t.Fatal(err)
		}
	}
	theirs := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, other, "taken.example.com", meta))
	h.appended(t)

	_, _, err := h.svc.VerifyDomain(ctx, acct, taken.ID, meta)
	wantConflict(t, err, sendingdomain.ErrUnavailable.Code)
	h.nothingAppended(t, "a refused verify")
	if got := must[sendingdomain.State](t)(h.svc.Domain(ctx, theirs.ID)); got.Status != sendingdomain.StatusPending {
		t.Errorf("the other account's domain is %s, want pending", got.Status)
	}

	got, _, err := h.svc.VerifyDomain(ctx, acct, kept.ID, meta)
	if err != nil || got.Status != sendingdomain.StatusPending || !got.Deadline.Equal(h.clock.Now().Add(sendingdomain.VerificationWindow)) {
		t.Fatalf("verify of an expired domain: %s until %s, %v; want pending for another window", got.Status, got.Deadline, err)
	}
	_, claims := h.stream(t, sendingdomain.NameStream("kept.example.com"))
	if last, ok := claims[len(claims)-1].(*sendingdomain.NameClaimed); len(claims) != 2 || !ok || last.DomainID != kept.ID {
		t.Errorf("name stream %v; want a second claim by the restarted domain", claims)
	}
}
