package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// exportedMetadata returns the metadata of a stream's events as
// `mailroom events export` prints them.
func exportedMetadata(t *testing.T, s *apptest.Server, stream string) []map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := eventstore.Export(context.Background(), s.Ledger, eventstore.Start, stream, &buf); err != nil {
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
	n, err := eventstore.Verify(context.Background(), s.Ledger, func(b eventstore.Break) { breaks = append(breaks, b) })
	if err != nil || len(breaks) > 0 || n == 0 {
		t.Fatalf("verify: %d events checked, breaks %v, err %v", n, breaks, err)
	}
}
