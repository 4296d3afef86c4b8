package dnscheck_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
)

func newDKIMKey(t *testing.T) (*rsa.PrivateKey, string) {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return priv, base64.StdEncoding.EncodeToString(der)
}

// receiverAccepts reports whether go-msgauth, the library Mailroom signs
// with, verifies a message Mailroom signs (rsa-sha256) against record.
func receiverAccepts(t *testing.T, priv *rsa.PrivateKey, record string) bool {
	t.Helper()
	msg := "From: a@example.com\r\nTo: b@example.org\r\nSubject: hi\r\n\r\nHello.\r\n"
	var signed bytes.Buffer
	err := dkim.Sign(&signed, strings.NewReader(msg), &dkim.SignOptions{
		Domain: "example.com", Selector: "mrabc123", Signer: priv, Hash: crypto.SHA256,
		HeaderCanonicalization: dkim.CanonicalizationRelaxed, BodyCanonicalization: dkim.CanonicalizationRelaxed,
	})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := dkim.VerifyWithOptions(&signed, &dkim.VerifyOptions{
		LookupTXT: func(string) ([]string, error) { return []string{record}, nil },
	})
	if err != nil || len(vs) != 1 {
		t.Fatalf("verifying: %v (%d signatures)", err, len(vs))
	}
	return vs[0].Err == nil
}

// A DKIM key record counts exactly when receivers would check Mailroom's
// signatures with it: tag names and values are case-sensitive, v= and k=
// must be DKIM1 and rsa when given, an h= list must hold sha256 and an s=
// list email or *. Each case is also put to go-msgauth.
func TestDKIMKeyRecordIsReadAsReceiversReadIt(t *testing.T) {
	priv, key := newDKIMKey(t)
	_, otherKey := newDKIMKey(t)
	want := dnscheck.Record{Type: "TXT", Name: "mrabc123._domainkey.example.com", Value: "v=DKIM1; k=rsa; p=" + key}
	a := dnstest.Start(t)
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)

	for _, tc := range []struct {
		name, record, reason string // reason "": seen
	}{
		{"as asked", "v=DKIM1; k=rsa; p=" + key, ""},
		{"v= and k= left out", "p=" + key, ""},
		{"v= not first", "k=rsa; p=" + key + "; v=DKIM1", ""},
		{"testing flag", "v=DKIM1; k=rsa; t=y; p=" + key, ""},
		{"strict flag", "v=DKIM1; t=s; p=" + key, ""},
		{"both flags", "t=y:s; p=" + key, ""},
		{"h= holding sha256", "v=DKIM1; h=sha1:sha256; p=" + key, ""},
		{"h= spaced", "v=DKIM1; h= sha1 : sha256 ; p=" + key, ""},
		{"s=email", "v=DKIM1; s=email; p=" + key, ""},
		{"s=*", "v=DKIM1; s=*; p=" + key, ""},
		{"s= holding email", "v=DKIM1; s=other:email; p=" + key, ""},
		{"spaces around tags", " v = DKIM1 ; k = rsa ; p = " + key + " ; ", ""},
		{"folded base64", "v=DKIM1; k=rsa; p=" + key[:100] + " " + key[100:250] + " " + key[250:], ""},
		{"notes", "v=DKIM1; n=rotated in May; p=" + key, ""},
		{"an unknown tag K=", "v=DKIM1; K=ed25519; p=" + key, ""},

		{"P= for p=", "v=DKIM1; k=rsa; P=" + key, "no p= tag"},
		{"upper-case names", "V=DKIM1; K=RSA; P=" + key, "no p= tag"},
		{"v=dkim1", "v=dkim1; k=rsa; p=" + key, "v= is not DKIM1"},
		{"v=DKIM2", "v=DKIM2; k=rsa; p=" + key, "v= is not DKIM1"},
		{"k=RSA", "v=DKIM1; k=RSA; p=" + key, "k= is not rsa"},
		{"k=ed25519", "v=DKIM1; k=ed25519; p=" + key, "k= is not rsa"},
		{"h=sha1", "v=DKIM1; k=rsa; h=sha1; p=" + key, "h= lacks sha256"},
		{"h=SHA256", "v=DKIM1; k=rsa; h=SHA256; p=" + key, "h= lacks sha256"},
		{"s=other", "v=DKIM1; k=rsa; s=other; p=" + key, "s= lacks email"},
		{"s=EMAIL", "v=DKIM1; k=rsa; s=EMAIL; p=" + key, "s= lacks email"},
		{"text that is no tag", "v=DKIM1; rsa; p=" + key, "DKIM tag list malformed"},
		{"p= twice", "v=DKIM1; p=" + key + "; p=" + key, "DKIM tag given twice"},
		{"a no-break space in the key", "v=DKIM1; k=rsa; p=" + key[:100] + "\u00a0" + key[100:], "p= holds characters other than base64 and spaces"},
		{"a form feed in the key", "v=DKIM1; k=rsa; p=" + key[:100] + "\f" + key[100:], "p= holds characters other than base64 and spaces"},
		{"another key", "v=DKIM1; k=rsa; p=" + otherKey, "value differs"},
		{"another key, h=sha1", "v=DKIM1; k=rsa; h=sha1; p=" + otherKey, "value differs"},
	} {
		a.Clear()
		a.Set(dnscheck.Record{Type: "TXT", Name: want.Name, Value: tc.record})
		r := c.Check(context.Background(), []dnscheck.Record{want}).Servers[0].Records[0]
		if r.Seen != (tc.reason == "") || r.Reason != tc.reason {
			t.Errorf("%s: seen=%v reason=%q, want reason %q", tc.name, r.Seen, r.Reason, tc.reason)
		}
		if got := receiverAccepts(t, priv, tc.record); got != (tc.reason == "") {
			t.Errorf("%s: go-msgauth accepts=%v, the table says %v", tc.name, got, tc.reason == "")
		}
	}
}
