package sendingdomain_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	sd "github.com/mailroom/mailroom/domain/sendingdomain"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func key(sel string, at time.Time) sd.Key {
	return sd.Key{Selector: sel, PublicKey: "PUB" + sel, SealedKey: "sealed", CreatedAt: at}
}

// apply folds a decision into s: apply(s)(sd.Decide(...)).
func apply(s sd.State) func([]domain.Event, error) sd.State {
	return func(evs []domain.Event, err error) sd.State {
		if err != nil {
			panic(err)
		}
		for _, e := range evs {
			s = sd.Evolve(s, e)
		}
		return s
	}
}

func added() sd.State {
	k := key("mrold111", t0)
	return apply(sd.State{})(sd.Add(sd.State{}, "d1", "a1", "example.com", "eu-west-1", &k, nil, t0))
}

func TestNormalizeName(t *testing.T) {
	ok := map[string]string{
		"Example.COM.":      "example.com",
		" mail.example.com": "mail.example.com",
		"bücher.de":         "xn--bcher-kva.de",
		"xn--bcher-kva.de":  "xn--bcher-kva.de",
		"テスト.jp":            "xn--zckzah.jp",
	}
	for in, want := range ok {
		if got, problem := sd.NormalizeName(in); got != want || problem != "" {
			t.Errorf("%q → %q (%s), want %q", in, got, problem, want)
		}
	}
	bad := []string{"", "localhost", "192.168.1.1", "[::1]", "exa mple.com", "-a.com", strings.Repeat("a", 64) + ".com",
		strings.Repeat("abcdefghi.", 26) + "com", "a..com", "example.123"}
	for _, in := range bad {
		if got, problem := sd.NormalizeName(in); problem == "" {
			t.Errorf("%q accepted as %q", in, got)
		}
	}
	// What was most likely meant is named.
	for in, want := range map[string]string{
		"https://acme.dev/": "must be a domain name, not a URL: example.com, not https://example.com/",
		"ann@acme.dev":      "must be a domain name, not an address: the part after the @",
		"acme.dev/mail":     "must be a domain name alone, without a path",
		"a_b.com":           "may only hold letters, digits and hyphens",
		"-a.com":            "has a label starting or ending with a hyphen",
		"a..com":            "has an empty label",
		"localhost":         "must have at least two labels, like example.com",
		"bü_cher.de":        "is not a valid domain name",
	} {
		if _, problem := sd.NormalizeName(in); problem != want {
			t.Errorf("%q: %q, want %q", in, problem, want)
		}
	}
}

// A name being added holds in its internationalised labels only letters,
// digits, marks, hyphens and the joiners IDNA2008 allows (Persian and Indic
// names use them), whichever form it is given in.
func TestCheckRegistrable(t *testing.T) {
	for in, want := range map[string]string{
		"☃.com":            "may only hold letters, digits, combining marks and hyphens; '☃' is not one",
		"xn--n3h.com":      "may only hold letters, digits, combining marks and hyphens; '☃' is not one",
		"xn--zz-zzz.de":    "may only hold letters, digits, combining marks and hyphens; '⦌' is not one",
		"bücher.de":        "",
		"می\u200cخواهم.ir": "",
		"example.com":      "",
	} {
		name, problem := sd.NormalizeName(in)
		if problem != "" {
			t.Fatalf("%q: %s", in, problem)
		}
		if got := sd.CheckRegistrable(name); got != want {
			t.Errorf("%q (%s): %q, want %q", in, name, got, want)
		}
	}
}

// A public suffix cannot be a sending domain: no one could verify it,
// and added it would hold the name from everyone. Names registered under
// one, and suffixes companies run for their customers, can.
func TestCheckOwnable(t *testing.T) {
	for name, ownable := range map[string]bool{
		"co.uk": false, "com.br": false, "xn--p1ai": false, "github.io": true,
		"acme.co.uk": true, "acme.com": true, "acme.github.io": true, "acme.test": true, "mail.acme.com.br": true,
	} {
		if problem := sd.CheckOwnable(name); (problem == "") != ownable {
			t.Errorf("%s: %q, want ownable %v", name, problem, ownable)
		}
	}
}

// A name is taken only if every record Mailroom derives from it has a
// name DNS allows.
func TestNormalizeNameFitsRecords(t *testing.T) {
	// 58 + 1 + 58 + 1 + 58 + 1 + 52 + 4 = 233
	name := strings.Join([]string{strings.Repeat("a", 58), strings.Repeat("b", 58), strings.Repeat("c", 58), strings.Repeat("d", 52)}, ".") + ".com"
	got, problem := sd.NormalizeName(name)
	if problem != "" || len(got) != 233 {
		t.Fatalf("233-character name: %q, %q", got, problem)
	}
	k := key("mrabc123", t0)
	s := apply(sd.State{})(sd.Add(sd.State{}, "d1", "a1", got, "eu-west-1", &k, nil, t0))
	for _, r := range s.Records() {
		if len(r.Name) > 253 {
			t.Errorf("record %s %s is %d characters", r.Type, r.Name, len(r.Name))
		}
	}
	if got, problem := sd.NormalizeName("e" + name); problem == "" || !strings.Contains(problem, "233") {
		t.Errorf("234-character name: %q, %q", got, problem)
	}
}

// A legacy domain of the longest name it may have still gets CNAME records
// DNS allows: their names hold the provider's 32-character tokens.
func TestLegacyNamesFitTheirCNAMEs(t *testing.T) {
	n := sd.MaxLegacyNameLength
	name := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", n-60-1-60-1-4) + ".com"
	if len(name) != n {
		t.Fatalf("test name is %d characters, want %d", len(name), n)
	}
	tokens := []string{strings.Repeat("t", 32), strings.Repeat("u", 32), strings.Repeat("v", 32)}
	s := apply(sd.State{})(sd.Add(sd.State{}, "d2", "a1", name, "us-east-1", nil, tokens, t0))
	for _, r := range s.Records() {
		if len(r.Name) > 253 {
			t.Errorf("record %s %s is %d characters", r.Type, r.Name, len(r.Name))
		}
	}
	if got := len(s.Records()[0].Name); got != 253 {
		t.Errorf("the longest legacy name leaves its CNAMEs %d characters, not DNS's 253", got)
	}
}

func TestRecords(t *testing.T) {
	s := added()
	recs := s.Records()
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4: %+v", len(recs), recs)
	}
	want := []sd.Record{
		{Type: "TXT", Name: "mrold111._domainkey.example.com", Value: "v=DKIM1; k=rsa; p=PUBmrold111", Group: "dkim"},
		{Type: "MX", Name: "send.example.com", Value: "feedback-smtp.eu-west-1.amazonses.com", Priority: 10, Group: "mail_from"},
		{Type: "TXT", Name: "send.example.com", Value: "v=spf1 include:amazonses.com ~all", Group: "mail_from"},
		{Type: "TXT", Name: "_dmarc.example.com", Value: "v=DMARC1; p=none;", Group: "dmarc"},
	}
	for i := range want {
		got := recs[i]
		got.Selector = ""
		if got != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, got, want[i])
		}
	}
}

func TestVerificationWindow(t *testing.T) {
	s := added()
	if !s.Deadline.Equal(t0.Add(72 * time.Hour)) {
		t.Fatalf("deadline %v", s.Deadline)
	}
	// Partial DNS: recorded, still pending.
	s = apply(s)(sd.RecordCheck(s, "a1", sd.Outcome{MailFromOK: true}, false, t0.Add(time.Hour)))
	if s.Status != sd.StatusPending || !s.MailFromOK || s.DkimOK {
		t.Fatalf("after partial check: %+v", s)
	}
	// The same outcome in the background records nothing.
	if evs, _ := sd.RecordCheck(s, "a1", sd.Outcome{MailFromOK: true}, false, t0.Add(2*time.Hour)); len(evs) != 0 {
		t.Fatalf("unchanged background check recorded %v", evs)
	}
	// Before the deadline nothing expires; at it, it does, once.
	if evs, _ := sd.Expire(s, t0.Add(71*time.Hour)); len(evs) != 0 {
		t.Fatal("expired early")
	}
	s = apply(s)(sd.Expire(s, t0.Add(72*time.Hour)))
	if s.Status != sd.StatusFailed {
		t.Fatalf("status %s after deadline", s.Status)
	}
	if evs, _ := sd.Expire(s, t0.Add(73*time.Hour)); len(evs) != 0 {
		t.Fatal("expired twice")
	}
	// A background check does not revive it; an asked one restarts the window.
	if evs, _ := sd.RecordCheck(s, "", sd.Outcome{DkimOK: true, MailFromOK: true}, false, t0.Add(74*time.Hour)); len(evs) != 1 {
		t.Fatalf("background check on a failed domain: %v", evs)
	}
	s = apply(s)(sd.RecordCheck(s, "a1", sd.Outcome{DkimOK: true, MailFromOK: true}, true, t0.Add(80*time.Hour)))
	if s.Status != sd.StatusVerified || !s.Deadline.Equal(t0.Add(152*time.Hour)) {
		t.Fatalf("after verify: %+v", s)
	}
}

// A client polling verify in a loop adds no event a request: an asked check
// that finds what the last recorded one found is recorded again only after
// RepeatedCheckQuiet, and one that finds something else at once.
func TestRepeatedAskedChecksAreRecordedWhenTheySaySomethingNew(t *testing.T) {
	s := added()
	missing := sd.Outcome{MailFromOK: true, Servers: []sd.ServerCheck{{Server: "1.1.1.1:53", Records: []sd.RecordVerdict{
		{Type: "TXT", Name: "mrold111._domainkey.example.com", Reason: "NXDOMAIN"},
		{Type: "MX", Name: "send.example.com", OK: true},
	}}}}
	s = apply(s)(sd.RecordCheck(s, "a1", missing, true, t0))
	if s.LastCheck == nil || !s.LastCheck.CheckedAt.Equal(t0) {
		t.Fatalf("the first asked check was not recorded: %+v", s.LastCheck)
	}
	if evs, _ := sd.RecordCheck(s, "a1", missing, true, t0.Add(sd.RepeatedCheckQuiet-time.Second)); len(evs) != 0 {
		t.Fatalf("the same finding asked again was recorded: %v", evs)
	}
	if evs, _ := sd.RecordCheck(s, "a1", missing, true, t0.Add(sd.RepeatedCheckQuiet)); len(evs) != 1 {
		t.Fatalf("the same finding asked again %s later: %v", sd.RepeatedCheckQuiet, evs)
	}

	// Another reason for the same missing record is news.
	timeout := missing
	timeout.Servers = []sd.ServerCheck{{Server: "1.1.1.1:53", Records: []sd.RecordVerdict{
		{Type: "TXT", Name: "mrold111._domainkey.example.com", Reason: "timeout"},
		{Type: "MX", Name: "send.example.com", OK: true},
	}}}
	if evs, _ := sd.RecordCheck(s, "a1", timeout, true, t0.Add(time.Minute)); len(evs) != 1 {
		t.Fatalf("a new reason was not recorded: %v", evs)
	}
	for name, o := range map[string]sd.Outcome{
		"dmarc found":                      {MailFromOK: true, DmarcOK: true, Servers: missing.Servers},
		"another resolver":                 {MailFromOK: true, Servers: append([]sd.ServerCheck{{Server: "8.8.8.8:53"}}, missing.Servers...)},
		"a resolver in place of the other": {MailFromOK: true, Servers: []sd.ServerCheck{{Server: "8.8.8.8:53", Records: missing.Servers[0].Records}}},
	} {
		if evs, _ := sd.RecordCheck(s, "a1", o, true, t0.Add(time.Minute)); len(evs) != 1 {
			t.Errorf("%s: not recorded: %v", name, evs)
		}
	}

	// The record published: recorded and verified, however soon.
	found := sd.Outcome{DkimOK: true, MailFromOK: true}
	s = apply(s)(sd.RecordCheck(s, "a1", found, true, t0.Add(time.Minute)))
	if s.Status != sd.StatusVerified || s.LastCheck.DkimOK != true {
		t.Fatalf("after the record was published: %+v", s)
	}
}

func TestRotation(t *testing.T) {
	s := added()
	s = apply(s)(sd.RecordCheck(s, "a1", sd.Outcome{DkimOK: true, MailFromOK: true}, true, t0))
	if _, err := sd.StartRotation(s, "other", key("mrnew222", t0), t0); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("another account rotates: %v", err)
	}
	s = apply(s)(sd.StartRotation(s, "a1", key("mrnew222", t0.Add(time.Hour)), t0.Add(time.Hour)))
	if s.Transition == nil || s.Transition.State != sd.AwaitingDNS || s.Selector() != "mrold111" {
		t.Fatalf("after rotate: %+v", s)
	}
	var conflict *domain.ConflictError
	if _, err := sd.StartRotation(s, "a1", key("mrthird3", t0), t0); !errors.As(err, &conflict) {
		t.Fatalf("second rotation: %v", err)
	}
	if n := len(s.Records()); n != 5 {
		t.Fatalf("%d records during rotation, want 5", n)
	}
	// New record not seen: no cutover.
	if evs, _ := sd.RecordCheck(s, "", sd.Outcome{DkimOK: true, MailFromOK: true}, false, t0.Add(2*time.Hour)); len(evs) != 0 {
		t.Fatalf("cut over without the new record: %v", evs)
	}
	cut := t0.Add(3 * time.Hour)
	s = apply(s)(sd.RecordCheck(s, "", sd.Outcome{DkimOK: true, MailFromOK: true, NewKeyOK: true}, false, cut))
	if s.Selector() != "mrnew222" || s.Transition.State != sd.CutOver || !s.Transition.OldKeyRetiresAt.Equal(cut.Add(7*24*time.Hour)) {
		t.Fatalf("after cutover: %+v", s.Transition)
	}
	if n := len(s.Records()); n != 5 {
		t.Fatalf("old record must stay listed until retired; %d records", n)
	}
	if evs, _ := sd.RetireOldKey(s, cut.Add(7*24*time.Hour-time.Minute)); len(evs) != 0 {
		t.Fatal("retired early")
	}
	s = apply(s)(sd.RetireOldKey(s, cut.Add(7*24*time.Hour)))
	if s.Transition != nil || len(s.Records()) != 4 || s.Records()[0].Selector != "mrnew222" {
		t.Fatalf("after retirement: %+v", s.Records())
	}
	if evs, _ := sd.RetireOldKey(s, cut.Add(8*24*time.Hour)); len(evs) != 0 {
		t.Fatal("retired twice")
	}
}

func TestUpgrade(t *testing.T) {
	legacy := apply(sd.State{})(sd.Add(sd.State{}, "d2", "a1", "legacy.com", "us-east-1", nil, []string{"tok1", "tok2", "tok3"}, t0))
	if legacy.Mode != sd.Legacy || len(legacy.Records()) != 6 || legacy.Records()[0].Type != "CNAME" {
		t.Fatalf("legacy domain: %+v", legacy.Records())
	}
	var conflict *domain.ConflictError
	if _, err := sd.StartRotation(legacy, "a1", key("mrx", t0), t0); !errors.As(err, &conflict) {
		t.Fatal("rotation of a legacy domain must be refused")
	}
	if _, err := sd.StartUpgrade(added(), "a1", key("mrx", t0), t0); !errors.As(err, &conflict) || conflict.Code != "already_byodkim" {
		t.Fatalf("upgrade of a BYODKIM domain: %v", err)
	}
	s := apply(legacy)(sd.StartUpgrade(legacy, "a1", key("mrup0001", t0), t0))
	// A rotation asked during the upgrade is told to wait for it, not to
	// start one; a second upgrade likewise.
	for name, err := range map[string]error{"rotate": sd.CanRotate(s, "a1"), "upgrade": sd.CanUpgrade(s, "a1")} {
		if !errors.As(err, &conflict) || conflict.Code != "transition_in_progress" ||
			conflict.Detail != "a DKIM key upgrade is already under way; another can start once its new key is verified and the old one retired, 7 days after cutover" {
			t.Errorf("%s during an upgrade: %v", name, err)
		}
	}
	s = apply(s)(sd.RecordCheck(s, "a1", sd.Outcome{DkimOK: true, MailFromOK: true, NewKeyOK: true}, true, t0))
	if err := sd.CanRotate(s, "a1"); !errors.As(err, &conflict) || conflict.Code != "transition_in_progress" ||
		!strings.HasSuffix(conflict.Detail, "another can start once the old key is retired, at "+t0.Add(sd.OldKeyOverlap).UTC().Format("2006-01-02T15:04:05.000Z")+" (old_key_retires_at)") {
		t.Errorf("rotation after the upgrade's cutover: %v", err)
	}
	if s.Mode != sd.BYODKIM || s.Selector() != "mrup0001" || s.Status != sd.StatusVerified {
		t.Fatalf("after upgrade cutover: %+v", s)
	}
	if n := len(s.Records()); n != 7 {
		t.Fatalf("CNAMEs must stay until retired: %d records", n)
	}
	s = apply(s)(sd.RetireOldKey(s, t0.Add(8*24*time.Hour)))
	if len(s.Records()) != 4 || s.LegacyTokens != nil {
		t.Fatalf("after retirement: %+v", s.Records())
	}
}

func TestRemoveAndClaim(t *testing.T) {
	s := added()
	if _, err := sd.Remove(s, "other", t0); !errors.Is(err, domain.ErrNotFound) {
		t.Fatal("another account removed the domain")
	}
	s = apply(s)(sd.Remove(s, "a1", t0))
	if s.Exists() || s.CanSend() {
		t.Fatal("removed domain still exists")
	}
	if _, err := sd.RecordCheck(s, "a1", sd.Outcome{}, true, t0); !errors.Is(err, domain.ErrNotFound) {
		t.Fatal("verify of a removed domain")
	}
}

func TestNameClaim(t *testing.T) {
	code := func(evs []domain.Event, err error) string {
		var conflict *domain.ConflictError
		switch {
		case errors.As(err, &conflict):
			return conflict.Code
		case err != nil:
			return err.Error()
		case len(evs) != 1:
			return "no claim"
		}
		return "claimed"
	}
	later := t0.Add(time.Hour)
	a := added() // d1 of a1, pending, claimed at t0
	c := sd.EvolveClaim(sd.Claim{}, &sd.NameClaimed{AccountID: "a1", DomainID: "d1", ClaimedAt: t0})
	verified := apply(a)(sd.VerifyBySandbox(a, t0))
	failed := apply(a)(sd.Expire(a, t0.Add(sd.VerificationWindow)))
	removed := apply(a)(sd.Remove(a, "a1", t0))
	cases := []struct {
		name    string
		c       sd.Claim
		holder  sd.State
		known   []sd.State
		account string
		now     time.Time
		want    string
	}{
		{"free name", sd.Claim{}, sd.State{}, nil, "a2", t0, "claimed"},
		{"pending elsewhere", c, a, nil, "a2", later, "domain_unavailable"},
		{"verified elsewhere", c, verified, nil, "a2", later, "domain_unavailable"},
		{"same account, any status", c, failed, nil, "a1", later, "domain_exists"},
		{"expired elsewhere frees it", c, failed, nil, "a2", later, "claimed"},
		{"removed frees it", c, removed, nil, "a2", t0, "claimed"},
		{"removed frees it for the same account", c, removed, nil, "a1", t0, "claimed"},
		{"released", sd.EvolveClaim(c, &sd.NameReleased{DomainID: "d1"}), sd.State{}, nil, "a2", t0, "claimed"},
		// The domain is appended after its claim: a fresh claim holds the name.
		{"fresh claim, domain not yet added", c, sd.State{}, nil, "a2", t0.Add(time.Second), "domain_unavailable"},
		{"fresh claim of the same account", c, sd.State{}, nil, "a1", t0.Add(time.Second), "domain_exists"},
		{"fresh re-claim of an expired domain", c, failed, nil, "a2", t0.Add(time.Second), "domain_unavailable"},
		{"stale claim of a crashed add", c, sd.State{}, nil, "a2", t0.Add(sd.ClaimGrace), "claimed"},
		// Domains from before names were claimed across accounts.
		{"unclaimed domain elsewhere", sd.Claim{}, sd.State{}, []sd.State{verified}, "a2", later, "domain_unavailable"},
		{"unclaimed expired domain elsewhere", sd.Claim{}, sd.State{}, []sd.State{failed}, "a2", later, "claimed"},
		{"unclaimed domain of the same account", sd.Claim{}, sd.State{}, []sd.State{failed}, "a1", later, "domain_exists"},
	}
	for _, tc := range cases {
		got := code(sd.ClaimName(tc.c, tc.holder, tc.known, tc.account, "example.com", "d9", tc.now))
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// The domain itself re-claims its name (verify after expiry).
	if got := code(sd.ClaimName(c, failed, []sd.State{failed}, "a1", "example.com", "d1", later)); got != "claimed" {
		t.Errorf("re-claim by its own domain: %s", got)
	}
	// The refusal names no account.
	_, err := sd.ClaimName(c, verified, nil, "a2", "example.com", "d9", later)
	if strings.Contains(err.Error(), "a1") || strings.Contains(err.Error(), "d1") {
		t.Errorf("refusal reveals the holder: %v", err)
	}
}

func TestKeyChecksBeforeKeys(t *testing.T) {
	legacy := apply(sd.State{})(sd.Add(sd.State{}, "d2", "a1", "legacy.com", "us-east-1", nil, []string{"t1", "t2", "t3"}, t0))
	for name, err := range map[string]error{
		"rotate unknown":        sd.CanRotate(sd.State{}, "a1"),
		"rotate other account":  sd.CanRotate(added(), "a2"),
		"upgrade unknown":       sd.CanUpgrade(sd.State{}, "a1"),
		"upgrade other account": sd.CanUpgrade(legacy, "a2"),
	} {
		if !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("%s: %v, want not found", name, err)
		}
	}
	verified := apply(added())(sd.VerifyBySandbox(added(), t0))
	if sd.CanRotate(verified, "a1") != nil || sd.CanUpgrade(legacy, "a1") != nil {
		t.Error("allowed changes refused")
	}
	if sd.CanRotate(added(), "a1") != nil {
		t.Error("rotating a pending domain refused")
	}
}

// A domain not verified yet has signed nothing with its key: a rotation
// replaces the key at once, with no transition, and the new key's record
// is the one to publish and see before it verifies.
func TestRotatingAnUnverifiedDomainReplacesItsKey(t *testing.T) {
	s := added()
	s = apply(s)(sd.RecordCheck(s, "a1", sd.Outcome{DkimOK: true}, true, t0.Add(time.Minute))) // old key seen, MAIL FROM not yet
	newKey := key("mrnew222", t0.Add(time.Hour))
	evs, err := sd.StartRotation(s, "a1", newKey, t0.Add(time.Hour))
	if err != nil || len(evs) != 1 {
		t.Fatalf("rotate a pending domain: %v %v", evs, err)
	}
	r, ok := evs[0].(*sd.KeyReplaced)
	if !ok || r.OldSelector != "mrold111" || r.Key.Selector != "mrnew222" {
		t.Fatalf("rotate a pending domain: %+v", evs[0])
	}
	s = apply(s)(evs, nil)
	if s.Transition != nil || s.Active.Selector != "mrnew222" || s.DkimOK || s.Status != sd.StatusPending {
		t.Fatalf("after replacing the key: %+v", s)
	}
	if keys := s.KeysLive(); len(keys) != 1 || keys[0].Selector != "mrnew222" {
		t.Fatalf("keys to publish after replacing: %+v", keys)
	}
	// It verifies with the new key's record.
	s = apply(s)(sd.RecordCheck(s, "a1", sd.Outcome{DkimOK: true, MailFromOK: true}, true, t0.Add(2*time.Hour)))
	if s.Status != sd.StatusVerified || s.Selector() != "mrnew222" {
		t.Fatalf("verified with the new key: %+v", s)
	}
	// A failed domain's key is replaced the same way; the window is
	// restarted by verify, not by the rotation.
	failed := apply(added())(sd.Expire(added(), t0.Add(sd.VerificationWindow)))
	failed = apply(failed)(sd.StartRotation(failed, "a1", newKey, t0.Add(sd.VerificationWindow+time.Hour)))
	if failed.Status != sd.StatusFailed || failed.Active.Selector != "mrnew222" {
		t.Fatalf("a failed domain rotated: %+v", failed)
	}
}

// A legacy domain signs with its first token; a pending or expired domain
// cannot send; a sandbox-verified one can, and is not verified again.
func TestLegacySelectorAndSandboxVerification(t *testing.T) {
	legacy := apply(sd.State{})(sd.Add(sd.State{}, "d2", "a1", "legacy.com", "us-east-1", nil, []string{"tok1", "tok2", "tok3"}, t0))
	if got := legacy.Selector(); got != "tok1" {
		t.Fatalf("legacy selector %q", got)
	}
	s := added()
	if s.CanSend() {
		t.Fatal("a pending domain can send")
	}
	s = apply(s)(sd.VerifyBySandbox(s, t0))
	if !s.CanSend() || !s.DkimOK || !s.MailFromOK {
		t.Fatalf("after sandbox verification: %+v", s)
	}
	if evs, err := sd.VerifyBySandbox(s, t0); err != nil || len(evs) != 0 {
		t.Fatalf("verifying again: %v %v", evs, err)
	}
	// Once verified, background checks decide nothing, even if DNS changed.
	if evs, _ := sd.RecordCheck(s, "", sd.Outcome{}, false, t0.Add(time.Hour)); len(evs) != 0 {
		t.Fatalf("background check of a verified domain: %v", evs)
	}
	failed := apply(added())(sd.Expire(added(), t0.Add(sd.VerificationWindow)))
	if failed.CanSend() {
		t.Fatal("an expired domain can send")
	}
	// An expired domain has given up its name, which another account may
	// have taken since: only a verify, claiming it again, brings it back.
	var conflict *domain.ConflictError
	if evs, err := sd.VerifyBySandbox(failed, t0.Add(sd.VerificationWindow)); !errors.As(err, &conflict) || len(evs) != 0 {
		t.Fatalf("sandbox verification of an expired domain: %v %v", evs, err)
	}
}

// The release of a removed domain does not free the name its successor
// (same name, added again) now holds.
func TestAnOlderDomainsReleaseKeepsTheNewerClaim(t *testing.T) {
	c := sd.EvolveClaim(sd.Claim{}, &sd.NameClaimed{AccountID: "a1", DomainID: "d2", ClaimedAt: t0})
	if c = sd.EvolveClaim(c, &sd.NameReleased{DomainID: "d1", ReleasedAt: t0}); c.DomainID != "d2" {
		t.Fatalf("an older domain's release freed d2's claim: %+v", c)
	}
}

// 63-character labels and the ends of the letter and digit ranges are valid.
func TestNamesAtTheEdgesOfTheirRules(t *testing.T) {
	for _, in := range []string{strings.Repeat("z", 63) + ".example", "zz09.example"} {
		if got, p := sd.NormalizeName(in); p != "" || got != in {
			t.Errorf("%q: %q %q", in, got, p)
		}
	}
}

// The window is over at its deadline: an asked check then restarts it even
// before the poller has marked the domain failed; a background one does not.
func TestAnAskedCheckPastTheDeadlineRestartsTheWindow(t *testing.T) {
	s := added()
	due := s.Deadline
	if evs, _ := sd.RecordCheck(s, "", sd.Outcome{}, false, due); len(evs) != 0 {
		t.Fatalf("a background check past the deadline recorded %v", evs)
	}
	s = apply(s)(sd.RecordCheck(s, "a1", sd.Outcome{}, true, due.Add(time.Second)))
	if s.Status != sd.StatusPending || !s.Deadline.Equal(due.Add(time.Second+sd.VerificationWindow)) {
		t.Fatalf("after a verify past the deadline: %s until %s", s.Status, s.Deadline)
	}
	if evs, _ := sd.Expire(s, due.Add(time.Minute)); len(evs) != 0 {
		t.Fatalf("the restarted window expired at once: %v", evs)
	}
}

// rotation_due: a key older than the rotation age is due, one exactly that
// old is not; never during a key change, nor for a legacy domain (its key
// is the provider's).
func TestRotationIsDueForAnOldKeyOutsideAKeyChange(t *testing.T) {
	const maxAge = 180 * 24 * time.Hour
	s := apply(added())(sd.VerifyBySandbox(added(), t0))
	if s.RotationDue(t0.Add(maxAge), maxAge) {
		t.Error("a key exactly the rotation age old is due")
	}
	if !s.RotationDue(t0.Add(maxAge+time.Second), maxAge) {
		t.Error("a key older than the rotation age is not due")
	}
	rotating := apply(s)(sd.StartRotation(s, "a1", key("mrnew222", t0.Add(maxAge)), t0.Add(maxAge)))
	if rotating.RotationDue(t0.Add(2*maxAge), maxAge) {
		t.Error("rotation due during a key change")
	}
	legacy := apply(sd.State{})(sd.Add(sd.State{}, "d2", "a1", "legacy.com", "us-east-1", nil, []string{"tok1", "tok2", "tok3"}, t0))
	if legacy.RotationDue(t0.Add(2*maxAge), maxAge) {
		t.Error("rotation due for a legacy domain")
	}
}

// A DNS check judges the domain by the records of the key in use (the
// legacy CNAMEs before an upgrade cuts over) and, while a key awaits DNS,
// by that key's record for the cutover.
func TestChecksLookForTheKeyInUseAndTheKeyAwaitingDNS(t *testing.T) {
	s := apply(added())(sd.VerifyBySandbox(added(), t0))
	if _, ok := s.PendingKeyRecord(); ok {
		t.Fatal("a key awaits DNS before any rotation")
	}
	s = apply(s)(sd.StartRotation(s, "a1", key("mrnew222", t0), t0))
	if r := s.SigningRecords(); len(r) != 1 || r[0].Name != "mrold111._domainkey.example.com" {
		t.Fatalf("signing records during rotation: %+v", r)
	}
	if r, ok := s.PendingKeyRecord(); !ok || r.Name != "mrnew222._domainkey.example.com" || r.Value != "v=DKIM1; k=rsa; p=PUBmrnew222" {
		t.Fatalf("record awaiting DNS: %+v %v", r, ok)
	}
	s = apply(s)(sd.RecordCheck(s, "", sd.Outcome{DkimOK: true, MailFromOK: true, NewKeyOK: true}, false, t0.Add(time.Hour)))
	if _, ok := s.PendingKeyRecord(); ok {
		t.Fatal("a key awaits DNS after the cutover")
	}
	if r := s.SigningRecords(); len(r) != 1 || r[0].Name != "mrnew222._domainkey.example.com" {
		t.Fatalf("signing records after cutover: %+v", r)
	}

	legacy := apply(sd.State{})(sd.Add(sd.State{}, "d2", "a1", "legacy.com", "us-east-1", nil, []string{"tok1", "tok2", "tok3"}, t0))
	r := legacy.SigningRecords()
	if len(r) != 3 || r[0].Type != "CNAME" || r[0].Name != "tok1._domainkey.legacy.com" || r[0].Value != "tok1.dkim.amazonses.com" {
		t.Fatalf("signing records of a legacy domain: %+v", r)
	}
}

// A verify that restarts the window records its check, even one that finds
// what a check just before the deadline found: the domain shows when it
// was last looked at.
func TestAVerifyThatRestartsTheWindowRecordsItsCheck(t *testing.T) {
	s := added()
	missing := sd.Outcome{MailFromOK: true}
	s = apply(s)(sd.RecordCheck(s, "a1", missing, true, s.Deadline.Add(-time.Minute)))
	at := s.Deadline.Add(time.Second)
	evs, err := sd.RecordCheck(s, "a1", missing, true, at)
	if err != nil || len(evs) != 2 {
		t.Fatalf("verify past the deadline: %v %v", evs, err)
	}
	if s = apply(s)(evs, nil); s.LastCheck == nil || !s.LastCheck.CheckedAt.Equal(at) || s.Status != sd.StatusPending {
		t.Fatalf("after the verify: %s, last check %+v", s.Status, s.LastCheck)
	}
}

// A subdomain's DMARC policy may come from its organisational domain, the
// name just below its public suffix; that domain's own comes from nowhere
// else.
func TestOrganisationalDMARC(t *testing.T) {
	for name, want := range map[string]string{
		"mail.example.com":      "_dmarc.example.com",
		"a.b.example.co.uk":     "_dmarc.example.co.uk",
		"example.com":           "",
		"example.co.uk":         "",
		"news.acme.github.io":   "_dmarc.acme.github.io",
		"mail.orgdm.test":       "_dmarc.orgdm.test",
		"xn--bcher-kva.example": "",
	} {
		if got := sd.OrganisationalDMARC(name); got != want {
			t.Errorf("OrganisationalDMARC(%q) = %q, want %q", name, got, want)
		}
	}
}
