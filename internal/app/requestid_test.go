package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// exportedMetadata returns the metadata of a stream's events as
// `mailroom events export` prints them.
func exportedMetadata(t *testing.T, s *apptest.Server, stream string) []map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if _, _, err := eventstore.Export(context.Background(), s.Ledger, eventstore.Start, stream, &buf); err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct{ Metadata map[string]string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("export line %s: %v", sc.Bytes(), err)
		}
		out = append(out, line.Metadata)
	}
	if len(out) == 0 {
		t.Fatalf("stream %s has no events", stream)
	}
	return out
}

func TestClientRequestIDMarkedInEvents(t *testing.T) {
	s := apptest.Start(t)
	_, _, key := s.Sender("example.test")
	send := func(header http.Header) apptest.Response {
		t.Helper()
		r := s.DoHeader("POST", "/v1/emails/send", key, header,
			map[string]any{"from": "app@example.test", "to": "ann@example.org", "subject": "Hi", "text": "Hello"})
		if r.Status != http.StatusAccepted {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		return r
	}

	// A client's own id is echoed, and recorded apart from the server's.
	r := send(http.Header{"X-Request-Id": {"client-chosen-42"}})
	if got := r.Header.Get("X-Request-Id"); got != "client-chosen-42" {
		t.Fatalf("X-Request-Id = %q, want the client's", got)
	}
	meta := exportedMetadata(t, s, email.Stream(r.JSON(t)["id"].(string)))[0]
	if meta["client_request_id"] != "client-chosen-42" {
		t.Errorf("client_request_id = %q, want the client's id", meta["client_request_id"])
	}
	for _, field := range []string{"request_id", "correlation_id", "causation_id"} {
		if !strings.HasPrefix(meta[field], "req_") || meta[field] == "client-chosen-42" {
			t.Errorf("%s = %q, want an id the server generated", field, meta[field])
		}
	}

	// Without one, the server's id is echoed and is the events' request id.
	r = send(nil)
	echoed := r.Header.Get("X-Request-Id")
	meta = exportedMetadata(t, s, email.Stream(r.JSON(t)["id"].(string)))[0]
	if !strings.HasPrefix(echoed, "req_") || meta["request_id"] != echoed || meta["correlation_id"] != echoed {
		t.Errorf("echoed %q, metadata %v", echoed, meta)
	}
	if _, ok := meta["client_request_id"]; ok {
		t.Errorf("client_request_id present without a client id: %v", meta)
	}

	// A problem carries the client's id too.
	bad := s.DoHeader("POST", "/v1/emails/send", key, http.Header{"X-Request-Id": {"client-chosen-43"}}, map[string]any{})
	if bad.Status != http.StatusUnprocessableEntity || bad.JSON(t)["request_id"] != "client-chosen-43" {
		t.Errorf("problem: %d %s", bad.Status, bad.Body)
	}

	// The hash chains hold over events with and without the new field.
	var breaks []eventstore.Break
	n, _, err := eventstore.Verify(context.Background(), s.Ledger, func(b eventstore.Break) { breaks = append(breaks, b) })
	if err != nil || len(breaks) > 0 || n == 0 {
		t.Fatalf("verify: %d events checked, breaks %v, err %v", n, breaks, err)
	}
}

// Every event names who recorded it, the request or run that began its
// story, and its cause, so an auditor can follow an email from the send
// request through the workers to the last webhook attempt.
func TestEveryEventTellsItsStory(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	w.endpoint(t, map[string]any{"url": rcv.URL})
	r := w.Do("POST", "/v1/emails/send", w.key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	request, emailID := r.Header.Get("X-Request-Id"), r.JSON(t)["id"].(string)
	rcv.waitFor(t, 2) // email.sent and email.delivered
	w.waitFor(t, emailID, status("delivered"))

	all := exportUntil(t, w.Server, 2)
	ids := map[string]string{} // event type of the email's stream -> event id
	for _, e := range all {
		for _, field := range []string{"actor", "request_id", "correlation_id", "causation_id"} {
			if e.Metadata[field] == "" {
				t.Errorf("%s on %s has no %s: %v", e.Type, e.Stream, field, e.Metadata)
			}
		}
		if e.Stream == email.Stream(emailID) {
			ids[e.Type] = e.EventID
		}
	}
	deliveries := map[string]bool{} // the streams of the email's deliveries
	for _, e := range all {
		if e.Type == "WebhookDeliveryCreated" && strings.Contains(string(e.Data), emailID) {
			deliveries[e.Stream] = true
		}
	}
	mine := 0
	for _, e := range all {
		if e.Stream != email.Stream(emailID) && !deliveries[e.Stream] {
			continue // another story: the account, the key, the domain, the endpoint
		}
		mine++
		if e.Metadata["correlation_id"] != request || e.Metadata["request_id"] != request {
			t.Errorf("%s on %s belongs to %q, want the send request %q", e.Type, e.Stream, e.Metadata["correlation_id"], request)
		}
		var cause string
		switch e.Type {
		case "EmailQueued":
			cause = request
		case "EmailSent", "EmailDelivered", "EmailScanned":
			cause = ids["EmailQueued"] // the pipeline's work on the queued email
		case "WebhookDeliveryCreated", "WebhookAttemptSucceeded":
			if e.Metadata["causation_id"] != ids["EmailSent"] && e.Metadata["causation_id"] != ids["EmailDelivered"] {
				t.Errorf("%s on %s caused by %q, want the email event it delivers", e.Type, e.Stream, e.Metadata["causation_id"])
			}
			continue
		default:
			t.Errorf("unexpected %s on %s", e.Type, e.Stream)
			continue
		}
		if e.Metadata["causation_id"] != cause {
			t.Errorf("%s caused by %q, want %q", e.Type, e.Metadata["causation_id"], cause)
		}
	}
	if mine < 7 { // queued, sent, delivered; two deliveries and their attempts
		t.Errorf("the email's story has %d events", mine)
	}
}

// exportedEvent is a line of the events export.
type exportedEvent struct {
	Stream   string            `json:"stream"`
	EventID  string            `json:"event_id"`
	Type     string            `json:"type"`
	Data     json.RawMessage   `json:"data"`
	Metadata map[string]string `json:"metadata"`
}

// exportUntil reads the whole log once it holds at least attempts
// WebhookAttemptSucceeded events (or after ten seconds).
func exportUntil(t *testing.T, s *apptest.Server, attempts int) []exportedEvent {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var buf bytes.Buffer
		if _, _, err := eventstore.Export(context.Background(), s.Ledger, eventstore.Start, "", &buf); err != nil {
			t.Fatal(err)
		}
		var all []exportedEvent
		n := 0
		for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			var e exportedEvent
			if err := json.Unmarshal(l, &e); err != nil {
				t.Fatalf("export line %s: %v", l, err)
			}
			if e.Type == "WebhookAttemptSucceeded" {
				n++
			}
			all = append(all, e)
		}
		if n >= attempts || time.Now().After(deadline) {
			return all
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Deliveries held while their endpoint was paused are attempted on
// resume, and the attempts still belong to the send request's story,
// caused by the email event they carry.
func TestResumedDeliveriesKeepTheEmailsStory(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	w.patch(t, id, map[string]any{"is_active": false})
	r := w.Do("POST", "/v1/emails/send", w.key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	request, emailID := r.Header.Get("X-Request-Id"), r.JSON(t)["id"].(string)
	w.waitFor(t, emailID, status("delivered"))
	w.waitDeliveries(t, id, 2, unattempted("pending", ""))
	w.patch(t, id, map[string]any{"is_active": true})
	rcv.waitFor(t, 2)

	all := exportUntil(t, w.Server, 2)
	emailEvents := map[string]bool{}
	for _, e := range all {
		if e.Stream == email.Stream(emailID) {
			emailEvents[e.EventID] = true
		}
	}
	attempts := 0
	for _, e := range all {
		if e.Type != "WebhookAttemptSucceeded" {
			continue
		}
		attempts++
		if e.Metadata["correlation_id"] != request || !emailEvents[e.Metadata["causation_id"]] {
			t.Errorf("attempt after the resume: correlation %q cause %q, want the send request %q and an event of the email",
				e.Metadata["correlation_id"], e.Metadata["causation_id"], request)
		}
	}
	if attempts != 2 {
		t.Errorf("%d attempts recorded, want 2", attempts)
	}
}
