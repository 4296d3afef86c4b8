package app_test

import (
	"bytes"
	"fmt"
	"net/mail"
	"os"
	"testing"

	"github.com/mailroom/mailroom/domain/email"
)

// readEML parses the message the sandbox wrote for an email.
func (w *sendWorld) readEML(t *testing.T, id string) (raw []byte, msg *mail.Message) {
	t.Helper()
	raw, err := os.ReadFile(w.outbox(id))
	if err != nil {
		t.Fatal(err)
	}
	msg, err = mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return raw, msg
}

func addressList(t *testing.T, msg *mail.Message, header string) []string {
	t.Helper()
	list, err := msg.Header.AddressList(header)
	if err != nil {
		t.Fatalf("%s: %v (%q)", header, err, msg.Header.Get(header))
	}
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = a.Name + "|" + a.Address
	}
	return out
}

// A display name holding a comma is one address, from the request to the
// message: reply_to and to are kept as lists, never joined and split.
func TestAddressesWithCommas(t *testing.T) {
	w := newSendWorld(t)
	id := w.send(t, map[string]any{
		"from":     "a@acme.test",
		"to":       []string{`"Roe, Rick" <rick@example.org>`, "ann@example.org"},
		"reply_to": `"Doe, Jane" <jane@example.org>`,
		"subject":  "commas",
		"text":     "t",
	})["id"].(string)
	e := w.waitFor(t, id, func(e map[string]any) bool { return e["status"] != "queued" })
	if e["status"] != "delivered" {
		t.Fatalf("status %v, events %v", e["status"], e["events"])
	}
	if e["to_email"] != `"Roe, Rick" <rick@example.org>, ann@example.org` {
		t.Fatalf("to_email %v", e["to_email"])
	}
	raw, msg := w.readEML(t, id)
	if !bytes.Contains(raw, []byte("\r\nReply-To: \"Doe, Jane\" <jane@example.org>\r\n")) {
		t.Fatalf("Reply-To header: %q", msg.Header.Get("Reply-To"))
	}
	if got := addressList(t, msg, "Reply-To"); fmt.Sprint(got) != "[Doe, Jane|jane@example.org]" {
		t.Fatalf("Reply-To parses as %v", got)
	}
	if got := addressList(t, msg, "To"); fmt.Sprint(got) != "[Roe, Rick|rick@example.org |ann@example.org]" {
		t.Fatalf("To parses as %v", got)
	}

	// Several reply_to addresses, each with a comma in its name.
	id = w.send(t, map[string]any{
		"from":     "a@acme.test",
		"to":       "bob@example.org",
		"reply_to": []string{`"Doe, Jane" <jane@example.org>`, `"Roe, Rick" <rick@example.org>`, "desk@acme.test"},
		"subject":  "commas",
		"text":     "t",
	})["id"].(string)
	w.waitFor(t, id, status("delivered"))
	_, msg = w.readEML(t, id)
	if got := addressList(t, msg, "Reply-To"); fmt.Sprint(got) != "[Doe, Jane|jane@example.org Roe, Rick|rick@example.org |desk@acme.test]" {
		t.Fatalf("Reply-To parses as %v", got)
	}

	// The list filter matches recipients one by one.
	total := func(q string) any {
		r := w.Do("GET", "/v1/emails?to="+q, w.key, nil)
		if r.Status != 200 {
			t.Fatalf("GET /v1/emails?to=%s: %d %s", q, r.Status, r.Body)
		}
		return r.JSON(t)["pagination"].(map[string]any)["total"]
	}
	if n := total("ROE"); n != 1.0 {
		t.Fatalf("to=ROE: %v emails", n)
	}
	if n := total("example.org%3E%2C%20ann"); n != 0.0 { // "example.org>, ann" spans two recipients
		t.Fatalf("a match across two recipients: %v emails", n)
	}
	if n := total("ann%40example"); n != 1.0 {
		t.Fatalf("to=ann@example: %v emails", n)
	}
}

// An email queued before reply_to was a list holds it as one string joined
// with ", "; it is still read as the addresses it meant, and sent.
func TestReplyToQueuedAsJoinedString(t *testing.T) {
	w := newSendWorld(t)
	id := w.queueAsBefore(t, email.Queued{}, func(fields map[string]any) {
		fields["reply_to"] = "Desk <desk@acme.test>, sales@acme.test"
	})
	w.waitFor(t, id, status("delivered"))
	_, msg := w.readEML(t, id)
	if got := addressList(t, msg, "Reply-To"); fmt.Sprint(got) != "[Desk|desk@acme.test |sales@acme.test]" {
		t.Fatalf("Reply-To parses as %v", got)
	}
}
