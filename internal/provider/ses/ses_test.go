package ses

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/provider/ses/sesfake"
)

var (
	keyOnce sync.Once
	testKey *rsa.PrivateKey
)

func rsaKey(t *testing.T) *rsa.PrivateKey {
	keyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		testKey = k
	})
	return testKey
}

func TestSendCarriesRawContentConfigurationSetAndTags(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	raw := []byte("From: a@example.com\r\nTo: b@example.net\r\nSubject: hi\r\n\r\nhello\r\n")
	id, err := p.Send(context.Background(), provider.Outbound{
		EmailID: "em_123", From: "a@example.com",
		Recipients: []string{"b@example.net", "hidden@example.org"},
		Raw:        raw,
		Tags:       map[string]string{"campaign": "spring sale!", "mailroom_email_id": "spoof", "é": "x", "empty": ""},
	})
	if err != nil {
		t.Fatal(err)
	}
	if id != "0100018f-fake-ses-message-id-000000" {
		t.Errorf("message id = %q", id)
	}
	reqs := f.recorded()
	if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].Path != "/v2/email/outbound-emails" {
		t.Fatalf("requests = %+v", reqs)
	}
	b := reqs[0].Body
	data := b["Content"].(map[string]any)["Raw"].(map[string]any)["Data"].(string)
	got, err := base64.StdEncoding.DecodeString(data)
	if err != nil || string(got) != string(raw) {
		t.Errorf("raw data = %q (%v)", got, err)
	}
	if b["ConfigurationSetName"] != "mailroom-events" {
		t.Errorf("configuration set = %v", b["ConfigurationSetName"])
	}
	// SES would overwrite the From header (and its display name) with it.
	if _, ok := b["FromEmailAddress"]; ok {
		t.Errorf("FromEmailAddress = %v, want it left to the From header", b["FromEmailAddress"])
	}
	to := b["Destination"].(map[string]any)["ToAddresses"].([]any)
	if len(to) != 2 || to[1] != "hidden@example.org" {
		t.Errorf("destination = %v", to)
	}
	tags := map[string]string{}
	for _, tg := range b["EmailTags"].([]any) {
		m := tg.(map[string]any)
		tags[m["Name"].(string)] = m["Value"].(string)
	}
	want := map[string]string{"mailroom_email_id": "em_123", "campaign": "spring_sale_", "_": "x"}
	if len(tags) != len(want) {
		t.Errorf("tags = %v, want %v", tags, want)
	}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("tag %s = %q, want %q (all: %v)", k, tags[k], v, tags)
		}
	}
}

func TestSendErrorMapping(t *testing.T) {
	cases := []struct {
		code      string
		status    int
		permanent bool
		throttled bool
	}{
		{"MessageRejected", 400, true, false},
		{"MailFromDomainNotVerifiedException", 400, true, false},
		{"AccountSuspendedException", 400, true, false},
		{"BadRequestException", 400, true, false},
		{"TooManyRequestsException", 429, false, true},
		{"Throttling", 400, false, true},
		{"LimitExceededException", 400, false, false},
		{"SendingPausedException", 400, false, false},
		{"NotFoundException", 404, false, false},
		{"InternalFailure", 500, false, false},
		{"ServiceUnavailable", 503, false, false},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFakeAWS(t)
			f.failNext("POST /v2/email/outbound-emails", fakeError{Status: c.status, Code: c.code, Msg: "Email address is not verified."})
			_, err := f.provider("").Send(context.Background(), provider.Outbound{EmailID: "em_1", From: "a@example.com", Recipients: []string{"b@example.net"}, Raw: []byte("x")})
			if err == nil {
				t.Fatal("no error")
			}
			var rej *provider.RejectedError
			if got := errors.As(err, &rej); got != c.permanent {
				t.Fatalf("permanent = %v, want %v (err %v)", got, c.permanent, err)
			}
			if provider.IsThrottled(err) != c.throttled {
				t.Fatalf("throttled = %v, want %v (err %v)", provider.IsThrottled(err), c.throttled, err)
			}
			if c.permanent && (rej.Reason != "SES "+c.code+": Email address is not verified." || rej.Code != c.code) {
				t.Errorf("reason = %q, code = %q", rej.Reason, rej.Code)
			}
		})
	}
}

// The account's maximum send rate and status come from GetAccount.
func TestAccount(t *testing.T) {
	f := newFakeAWS(t)
	f.SetMaxSendRate(250)
	acct, err := f.provider("").Account(context.Background())
	want := Account{MaxSendRate: 250, Max24HourSend: 50000, Enforcement: "HEALTHY"}
	if err != nil || acct != want {
		t.Fatalf("Account = %+v, %v; want %+v", acct, err, want)
	}
	f.SetMaxSendRate(1)
	f.SetAccountStatus(sesfake.AccountStatus{Sandbox: true, SendingPaused: true, Enforcement: "PROBATION"})
	acct, err = f.provider("").Account(context.Background())
	want = Account{MaxSendRate: 1, Max24HourSend: 200, Sandbox: true, SendingPaused: true, Enforcement: "PROBATION"}
	if err != nil || acct != want {
		t.Fatalf("Account = %+v, %v; want %+v", acct, err, want)
	}
}

func TestSendTransportFailureIsTransient(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	f.Close()
	_, err := p.Send(context.Background(), provider.Outbound{EmailID: "em_1", From: "a@example.com", Recipients: []string{"b@example.net"}, Raw: []byte("x")})
	var rej *provider.RejectedError
	if err == nil || errors.As(err, &rej) {
		t.Fatalf("err = %v, want a transient error", err)
	}
}

func TestSanitizeTag(t *testing.T) {
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'a'
	}
	for in, want := range map[string]string{"ok_Tag-1": "ok_Tag-1", "a b.c": "a_b_c", "ü": "_", string(long): string(long[:256])} {
		if got := SanitizeTag(in); got != want {
			t.Errorf("SanitizeTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCreateIdentityBYODKIM(t *testing.T) {
	f := newFakeAWS(t)
	key := rsaKey(t)
	err := f.provider("").CreateIdentity(context.Background(), provider.Identity{
		DomainID: "d1", Domain: "example.com", MailFromDomain: "send.example.com", Region: "us-east-1",
		Selector: "mrabc123", PrivateKey: key,
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.recorded()
	if len(reqs) != 2 {
		t.Fatalf("requests = %+v", reqs)
	}
	if reqs[0].Method != "POST" || reqs[0].Path != "/v2/email/identities" || reqs[0].Body["EmailIdentity"] != "example.com" {
		t.Errorf("create = %+v", reqs[0])
	}
	checkSigningAttrs(t, reqs[0].Body["DkimSigningAttributes"], "mrabc123", key)
	if reqs[1].Method != "PUT" || reqs[1].Path != "/v2/email/identities/example.com/mail-from" ||
		reqs[1].Body["MailFromDomain"] != "send.example.com" || reqs[1].Body["BehaviorOnMxFailure"] != "USE_DEFAULT_VALUE" {
		t.Errorf("mail from = %+v", reqs[1])
	}
	id, ok := f.Identity("example.com")
	if !ok || id.Tags[OwnerTag] != "d1" || id.Selector != "mrabc123" || id.MailFromDomain != "send.example.com" {
		t.Errorf("identity at SES = %+v", id)
	}
}

func checkSigningAttrs(t *testing.T, v any, selector string, key *rsa.PrivateKey) {
	t.Helper()
	attrs, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("signing attributes = %v", v)
	}
	if attrs["DomainSigningSelector"] != selector {
		t.Errorf("selector = %v", attrs["DomainSigningSelector"])
	}
	der, err := base64.StdEncoding.DecodeString(attrs["DomainSigningPrivateKey"].(string))
	if err != nil {
		t.Fatal(err)
	}
	got, err := x509.ParsePKCS1PrivateKey(der)
	if err != nil || !got.Equal(key) {
		t.Errorf("private key does not round-trip: %v", err)
	}
}

// keyOf is the key an identity at the fake signs with, as SES got it.
func keyOf(t *testing.T, f *fakeAWS, domain string) string {
	t.Helper()
	id, ok := f.Identity(domain)
	if !ok {
		t.Fatalf("no identity %s at SES", domain)
	}
	return id.PrivateKey
}

func encodedKey(key *rsa.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(x509.MarshalPKCS1PrivateKey(key))
}

func TestCreateIdentityLegacyUsesEasyDKIM(t *testing.T) {
	f := newFakeAWS(t)
	if err := f.provider("").CreateIdentity(context.Background(), provider.Identity{DomainID: "d1", Domain: "old.example", MailFromDomain: "send.old.example"}); err != nil {
		t.Fatal(err)
	}
	reqs := f.recorded()
	if len(reqs) != 2 || reqs[0].Path != "/v2/email/identities" {
		t.Fatalf("requests = %+v", reqs)
	}
	if _, ok := reqs[0].Body["DkimSigningAttributes"]; ok {
		t.Errorf("legacy identity sent DkimSigningAttributes: %v", reqs[0].Body)
	}
}

// A retried create finds its own identity and sets its key again.
func TestCreateIdentityAlreadyExistsIsSuccess(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	key := rsaKey(t)
	id := provider.Identity{DomainID: "d1", Domain: "example.com", MailFromDomain: "send.example.com", Selector: "mrabc123", PrivateKey: key}
	for range 2 {
		if err := p.CreateIdentity(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	reqs := f.recorded()
	if len(reqs) != 6 || reqs[3].Method != "GET" || reqs[4].Path != "/v2/email/identities/example.com/dkim/signing" || reqs[5].Path != "/v2/email/identities/example.com/mail-from" {
		t.Fatalf("requests = %+v", reqs)
	}
	checkSigningAttrs(t, reqs[4].Body["SigningAttributes"], "mrabc123", key)
	if got := f.IdentityLog(); strings.Join(got, ",") != "create example.com,mail_from example.com,set_signing_key example.com,mail_from example.com" {
		t.Errorf("identity changes = %v", got)
	}
}

func TestCreateIdentityFailureIsReported(t *testing.T) {
	f := newFakeAWS(t)
	f.failNext("PUT /v2/email/identities/example.com/mail-from", fakeError{Status: 500, Code: "InternalFailure", Msg: "boom"})
	err := f.provider("").CreateIdentity(context.Background(), provider.Identity{DomainID: "d1", Domain: "example.com", MailFromDomain: "send.example.com", Selector: "s", PrivateKey: rsaKey(t)})
	if err == nil {
		t.Fatal("want an error")
	}
}

func TestSetSigningKey(t *testing.T) {
	f := newFakeAWS(t)
	f.PutIdentity("example.com", sesfake.Identity{Tags: map[string]string{OwnerTag: "d1"}, Selector: "mrold000"})
	key := rsaKey(t)
	if err := f.provider("").SetSigningKey(context.Background(), "d1", "example.com", "mrnew456", key); err != nil {
		t.Fatal(err)
	}
	reqs := f.recorded()
	if len(reqs) != 2 || reqs[0].Method != "GET" || reqs[1].Method != "PUT" || reqs[1].Path != "/v2/email/identities/example.com/dkim/signing" {
		t.Fatalf("requests = %+v", reqs)
	}
	if reqs[1].Body["SigningAttributesOrigin"] != "EXTERNAL" {
		t.Errorf("origin = %v", reqs[1].Body["SigningAttributesOrigin"])
	}
	checkSigningAttrs(t, reqs[1].Body["SigningAttributes"], "mrnew456", key)
	if got := keyOf(t, f, "example.com"); got != encodedKey(key) {
		t.Error("SES does not hold the new key")
	}
}

func TestDeleteIdentity(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	f.PutIdentity("example.com", sesfake.Identity{Tags: map[string]string{OwnerTag: "d1"}})
	if err := p.DeleteIdentity(context.Background(), "d1", "example.com"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Identity("example.com"); ok {
		t.Fatal("identity still at SES")
	}
	if err := p.DeleteIdentity(context.Background(), "d1", "example.com"); err != nil {
		t.Fatalf("a missing identity must count as deleted: %v", err)
	}
	f.PutIdentity("example.com", sesfake.Identity{Tags: map[string]string{OwnerTag: "d1"}})
	f.failNext("DELETE /v2/email/identities/example.com", fakeError{Status: 500, Code: "InternalFailure", Msg: "boom"})
	if err := p.DeleteIdentity(context.Background(), "d1", "example.com"); err == nil {
		t.Fatal("a 500 must be reported")
	}
	for _, r := range f.recorded() {
		if r.Path != "/v2/email/identities/example.com" || (r.Method != "DELETE" && r.Method != "GET") {
			t.Errorf("request = %+v", r)
		}
	}
}

// Only the domain that created an identity changes or deletes it; another
// domain of the same name gets provider.ErrNotOwner and SES keeps the
// owner's key and tag.
func TestIdentityOwnership(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	ctx := context.Background()
	ownerKey := rsaKey(t)
	otherKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CreateIdentity(ctx, provider.Identity{DomainID: "owner", Domain: "victim.com", MailFromDomain: "send.victim.com", Selector: "mrown111", PrivateKey: ownerKey}); err != nil {
		t.Fatal(err)
	}
	refusals := map[string]error{
		"create":        p.CreateIdentity(ctx, provider.Identity{DomainID: "other", Domain: "victim.com", MailFromDomain: "send.victim.com", Selector: "mroth222", PrivateKey: otherKey}),
		"legacy create": p.CreateIdentity(ctx, provider.Identity{DomainID: "other", Domain: "victim.com", MailFromDomain: "send.victim.com"}),
		"swap":          p.SetSigningKey(ctx, "other", "victim.com", "mroth222", otherKey),
		"delete":        p.DeleteIdentity(ctx, "other", "victim.com"),
	}
	for op, err := range refusals {
		if !errors.Is(err, provider.ErrNotOwner) {
			t.Errorf("%s by another domain: %v, want ErrNotOwner", op, err)
		}
	}
	id, ok := f.Identity("victim.com")
	if !ok || id.Tags[OwnerTag] != "owner" || id.Selector != "mrown111" || id.PrivateKey != encodedKey(ownerKey) || id.MailFromDomain != "send.victim.com" {
		t.Fatalf("the owner's identity changed: %+v", id)
	}
	if got := strings.Join(f.IdentityLog(), ","); got != "create victim.com,mail_from victim.com" {
		t.Fatalf("identity changes = %s", got)
	}
	// SES's verdict on the owner's identity says nothing of another domain.
	if dkim, _, err := p.IdentityVerification(ctx, "other", "victim.com"); err != nil || dkim {
		t.Errorf("another domain verified through the owner's identity: %v %v", dkim, err)
	}
	if dkim, _, err := p.IdentityVerification(ctx, "owner", "victim.com"); err != nil || !dkim {
		t.Errorf("the owner's verification: %v %v", dkim, err)
	}

	// An identity without an owner tag (made before owners were recorded) is
	// taken by the first domain that acts on it.
	f.PutIdentity("old.example", sesfake.Identity{Selector: "mrold000", PrivateKey: "OLD"})
	if err := p.CreateIdentity(ctx, provider.Identity{DomainID: "d3", Domain: "old.example", MailFromDomain: "send.old.example", Selector: "mrnew333", PrivateKey: otherKey}); err != nil {
		t.Fatalf("adopting an untagged identity: %v", err)
	}
	if keyOf(t, f, "old.example") != encodedKey(otherKey) {
		t.Error("the adopted identity does not sign with the new key")
	}
	if err := p.DeleteIdentity(ctx, "d3", "old.example"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Identity("old.example"); ok {
		t.Error("untagged identity not deleted")
	}
}

// An identity made before owners were recorded is taken by the first
// domain of its name that creates it or sets its key: SES tags it with that
// domain's id, so another domain of the same name (an installation from
// before names were claimed can have one in several accounts) can then
// neither swap its key nor delete it.
func TestAnIdentityWithoutOwnerBelongsToTheFirstDomainThatActsOnIt(t *testing.T) {
	ctx := context.Background()
	key := rsaKey(t)
	other, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for name, act := range map[string]func(*Provider) error{
		"BYODKIM create": func(p *Provider) error {
			return p.CreateIdentity(ctx, provider.Identity{DomainID: "d3", Domain: "old.example", MailFromDomain: "send.old.example", Selector: "mrnew333", PrivateKey: key})
		},
		"legacy create": func(p *Provider) error {
			return p.CreateIdentity(ctx, provider.Identity{DomainID: "d3", Domain: "old.example", MailFromDomain: "send.old.example"})
		},
		"key change": func(p *Provider) error { return p.SetSigningKey(ctx, "d3", "old.example", "mrnew333", key) },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeAWS(t)
			p := f.provider("")
			f.PutIdentity("old.example", sesfake.Identity{Selector: "mrold000", PrivateKey: "OLD"})
			if err := act(p); err != nil {
				t.Fatalf("d3 acting on the identity without owner: %v", err)
			}
			if id, _ := f.Identity("old.example"); id.Tags[OwnerTag] != "d3" {
				t.Fatalf("tags after d3 acted: %v, want %s=d3", id.Tags, OwnerTag)
			}
			for _, r := range f.recorded() {
				if r.Path == "/v2/email/tags" && r.Body["ResourceArn"] != "arn:aws:ses:us-east-1:"+sesfake.Account+":identity/old.example" {
					t.Errorf("tagged %v, want the identity's ARN in the provider's region", r.Body["ResourceArn"])
				}
			}
			before, _ := f.Identity("old.example")
			if err := p.SetSigningKey(ctx, "d4", "old.example", "mrd44444", other); !errors.Is(err, provider.ErrNotOwner) {
				t.Errorf("another domain swapping the key: %v, want ErrNotOwner", err)
			}
			if err := p.DeleteIdentity(ctx, "d4", "old.example"); !errors.Is(err, provider.ErrNotOwner) {
				t.Errorf("another domain deleting the identity: %v, want ErrNotOwner", err)
			}
			if after, ok := f.Identity("old.example"); !ok || after.Selector != before.Selector || after.PrivateKey != before.PrivateKey {
				t.Errorf("another domain changed the identity: %+v, was %+v", after, before)
			}
		})
	}
}

func TestGetIdentityStatus(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	f.PutIdentity("example.com", sesfake.Identity{Tags: map[string]string{OwnerTag: "d1"}, Selector: "mrabc123", MailFromDomain: "send.example.com"})
	st, err := p.GetIdentityStatus(context.Background(), "example.com")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || !st.VerifiedForSend || st.DkimStatus != "SUCCESS" || st.MailFromStatus != "PENDING" || st.Owner != "d1" {
		t.Errorf("status = %+v", st)
	}
	st, err = p.GetIdentityStatus(context.Background(), "gone.example")
	if err != nil || st.Exists {
		t.Errorf("missing identity: %+v, %v", st, err)
	}
}
