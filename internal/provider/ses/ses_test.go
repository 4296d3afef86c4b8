package ses

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"sync"
	"testing"

	"github.com/mailroom/mailroom/internal/provider"
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
	if b["FromEmailAddress"] != "a@example.com" {
		t.Errorf("from = %v", b["FromEmailAddress"])
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
	}{
		{"MessageRejected", 400, true},
		{"MailFromDomainNotVerifiedException", 400, true},
		{"AccountSuspendedException", 400, true},
		{"BadRequestException", 400, true},
		{"TooManyRequestsException", 429, false},
		{"LimitExceededException", 400, false},
		{"SendingPausedException", 400, false},
		{"NotFoundException", 404, false},
		{"InternalFailure", 500, false},
		{"ServiceUnavailable", 503, false},
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
			if c.permanent && (rej.Reason != "SES "+c.code+": Email address is not verified." || rej.Code != c.code) {
				t.Errorf("reason = %q, code = %q", rej.Reason, rej.Code)
			}
		})
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
		Domain: "example.com", MailFromDomain: "send.example.com", Region: "us-east-1",
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

func TestCreateIdentityLegacyUsesEasyDKIM(t *testing.T) {
	f := newFakeAWS(t)
	if err := f.provider("").CreateIdentity(context.Background(), provider.Identity{Domain: "old.example", MailFromDomain: "send.old.example"}); err != nil {
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

func TestCreateIdentityAlreadyExistsIsSuccess(t *testing.T) {
	f := newFakeAWS(t)
	f.failNext("POST /v2/email/identities", fakeError{Status: 400, Code: "AlreadyExistsException", Msg: "Email identity example.com already exist."})
	key := rsaKey(t)
	err := f.provider("").CreateIdentity(context.Background(), provider.Identity{Domain: "example.com", MailFromDomain: "send.example.com", Selector: "mrabc123", PrivateKey: key})
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.recorded()
	if len(reqs) != 3 || reqs[1].Path != "/v2/email/identities/example.com/dkim/signing" || reqs[2].Path != "/v2/email/identities/example.com/mail-from" {
		t.Fatalf("requests = %+v", reqs)
	}
	checkSigningAttrs(t, reqs[1].Body["SigningAttributes"], "mrabc123", key)
}

func TestCreateIdentityFailureIsReported(t *testing.T) {
	f := newFakeAWS(t)
	f.failNext("PUT /v2/email/identities/example.com/mail-from", fakeError{Status: 500, Code: "InternalFailure", Msg: "boom"})
	err := f.provider("").CreateIdentity(context.Background(), provider.Identity{Domain: "example.com", MailFromDomain: "send.example.com", Selector: "s", PrivateKey: rsaKey(t)})
	if err == nil {
		t.Fatal("want an error")
	}
}

func TestSetSigningKey(t *testing.T) {
	f := newFakeAWS(t)
	key := rsaKey(t)
	if err := f.provider("").SetSigningKey(context.Background(), "example.com", "mrnew456", key); err != nil {
		t.Fatal(err)
	}
	reqs := f.recorded()
	if len(reqs) != 1 || reqs[0].Method != "PUT" || reqs[0].Path != "/v2/email/identities/example.com/dkim/signing" {
		t.Fatalf("requests = %+v", reqs)
	}
	if reqs[0].Body["SigningAttributesOrigin"] != "EXTERNAL" {
		t.Errorf("origin = %v", reqs[0].Body["SigningAttributesOrigin"])
	}
	checkSigningAttrs(t, reqs[0].Body["SigningAttributes"], "mrnew456", key)
}

func TestDeleteIdentity(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	if err := p.DeleteIdentity(context.Background(), "example.com"); err != nil {
		t.Fatal(err)
	}
	f.failNext("DELETE /v2/email/identities/example.com", fakeError{Status: 404, Code: "NotFoundException", Msg: "Email identity example.com does not exist."})
	if err := p.DeleteIdentity(context.Background(), "example.com"); err != nil {
		t.Fatalf("NotFound must count as deleted: %v", err)
	}
	f.failNext("DELETE /v2/email/identities/example.com", fakeError{Status: 500, Code: "InternalFailure", Msg: "boom"})
	if err := p.DeleteIdentity(context.Background(), "example.com"); err == nil {
		t.Fatal("a 500 must be reported")
	}
	for _, r := range f.recorded() {
		if r.Method != "DELETE" || r.Path != "/v2/email/identities/example.com" {
			t.Errorf("request = %+v", r)
		}
	}
}

func TestGetIdentityStatus(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("")
	st, err := p.GetIdentityStatus(context.Background(), "example.com")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || !st.VerifiedForSend || st.DkimStatus != "SUCCESS" || st.MailFromStatus != "PENDING" {
		t.Errorf("status = %+v", st)
	}
	f.failNext("GET /v2/email/identities/gone.example", fakeError{Status: 404, Code: "NotFoundException"})
	st, err = p.GetIdentityStatus(context.Background(), "gone.example")
	if err != nil || st.Exists {
		t.Errorf("missing identity: %+v, %v", st, err)
	}
}
