package app_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/internal/provider/smtp/smtptest"
)

// TestSMTPProviderSignsWithDKIM sends through a real SMTP relay: the message
// arrives DKIM-signed with the domain's key, verifiable against the record
// the API asked to publish; after a rotation it verifies under the new
// selector.
func TestSMTPProviderSignsWithDKIM(t *testing.T) {
	relay := smtptest.Start(t)
	w := newDNSWorld(t, func(c *config.Config) {
		c.Provider = "smtp"
		c.SMTPURL = "smtp://" + relay.Addr
	})
	d := w.add(t, "signed.example")
	id := d["id"].(string)
	publish(t, d, w.a, w.b)
	if v := w.verify(t, id); v["status"] != "verified" {
		t.Fatalf("domain: %s", statuses(v))
	}
	key := w.Do("POST", "/api/auth/api-keys", w.admin, map[string]any{"name": "send"}).JSON(t)["key"].(string)

	// Verifiers look keys up in the local DNS server.
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dd net.Dialer
		return dd.DialContext(ctx, network, w.a.Addr())
	}}
	verify := func(raw []byte) []*dkim.Verification {
		vs, err := dkim.VerifyWithOptions(bytes.NewReader(raw), &dkim.VerifyOptions{
			LookupTXT: func(domain string) ([]string, error) { return resolver.LookupTXT(context.Background(), domain) },
		})
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	sendAndReceive := func(n int) []byte {
		r := w.Do("POST", "/v1/emails/send", key, map[string]any{"from": "Billing <billing@signed.example>", "to": "ann@example.org",
			"cc": "Ann <ANN@example.org>", "bcc": []string{"audit@example.org", "audit@example.org"}, "subject": "Signed", "text": "hello"})
		if r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		deadline := time.Now().Add(20 * time.Second)
		for len(relay.Messages()) < n {
			if time.Now().After(deadline) {
				t.Fatal("the relay got nothing")
			}
			time.Sleep(20 * time.Millisecond)
		}
		m := relay.Messages()[n-1]
		if m.From != "billing@signed.example" || strings.Join(m.To, ",") != "ann@example.org,audit@example.org" {
			t.Fatalf("envelope %s → %v", m.From, m.To)
		}
		return m.Data
	}

	raw := sendAndReceive(1)
	vs := verify(raw)
	if len(vs) != 1 || vs[0].Err != nil || vs[0].Domain != "signed.example" || !strings.HasPrefix(string(raw), "DKIM-Signature:") {
		t.Fatalf("DKIM verification: %+v", vs)
	}
	oldSel := d["dkim_selector"].(string)
	if !strings.Contains(string(raw[:400]), "s="+oldSel) {
		t.Fatalf("signed with another selector than %s", oldSel)
	}

	// Rotate, publish the new record, cut over; the next message uses the new key.
	rot := w.Do("POST", "/api/domains/"+id+"/rotate", w.admin, nil).JSON(t)
	newSel := rot["dkim_transition"].(map[string]any)["selector"].(string)
	for _, rec := range rot["dns_records"].([]any) {
		r := rec.(map[string]any)
		if strings.HasPrefix(r["name"].(string), newSel+".") {
			for _, s := range []*dnstest.Server{w.a, w.b} {
				s.Add(dnscheck.Record{Type: "TXT", Name: r["name"].(string), Value: r["value"].(string)})
			}
		}
	}
	w.tick(t)
	if g := w.get(t, id); g["dkim_selector"] != newSel {
		t.Fatalf("no cutover: %v", g["dkim_transition"])
	}
	raw = sendAndReceive(2)
	vs = verify(raw)
	if len(vs) != 1 || vs[0].Err != nil || !strings.Contains(string(raw[:400]), "s="+newSel) {
		t.Fatalf("after rotation: %+v", vs)
	}
	// The email is delivered when the relay accepts it.
	var emailID string
	w.Pool.QueryRow(context.Background(), "SELECT id FROM emails ORDER BY created_at DESC LIMIT 1").Scan(&emailID)
	(&sendWorld{Server: w.Server, key: key}).waitFor(t, emailID, status("delivered"))
}

// Through a relay, the customer's tags stay out of the message, and a
// refusal reaches the timeline with its codes but without the relay's
// host names and addresses.
func TestSMTPRelayTagsAndRefusals(t *testing.T) {
	relay := smtptest.Start(t)
	w := newSendWorld(t, func(c *config.Config) {
		c.Provider = "smtp"
		c.SMTPURL = "smtp://" + relay.Addr
	})
	tagged := map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t",
		"tags": map[string]string{"campaign": "spring-sale", "customer_id": "c-42"}}
	w.waitFor(t, w.send(t, tagged)["id"].(string), status("delivered"))
	msgs := relay.Messages()
	if len(msgs) != 1 {
		t.Fatalf("relay got %d messages", len(msgs))
	}
	if raw := string(msgs[0].Data); strings.Contains(raw, "X-SES-MESSAGE-TAGS") || strings.Contains(raw, "spring-sale") {
		t.Fatalf("the relayed message shows the tags:\n%s", raw)
	}

	relay.RejectData(&gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 7, 1},
		Message: "mx7.relay.corp.internal [10.20.30.40]: message refused by policy for account 123456789012"})
	e := w.waitFor(t, w.send(t, tagged)["id"].(string), status("failed"))
	meta := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
	if meta["reason"] != "provider_rejected" || meta["detail"] != "the provider rejected the message (554 5.7.1)" {
		t.Fatalf("failure metadata %v", meta)
	}
	body := string(w.Do("GET", "/v1/emails/"+e["id"].(string), w.key, nil).Body)
	for _, leak := range []string{"10.20.30.40", "relay.corp.internal", "123456789012", relay.Addr} {
		if strings.Contains(body, leak) {
			t.Errorf("the timeline shows %q: %s", leak, body)
		}
	}
}
