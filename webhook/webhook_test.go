package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/webhook"
)

const (
	secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body   = `{"type":"email.delivered","data":{"email_id":"em_1"}}`
)

var t0 = time.Unix(1700000000, 0)

// hmacHex computes the signature independently of the package.
func hmacHex(key, signed string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(signed))
	return hex.EncodeToString(h.Sum(nil))
}

func TestSignVerifyRoundTrip(t *testing.T) {
	h := webhook.Sign(secret, []byte(body), t0)
	if err := webhook.VerifyAt(secret, h, []byte(body), webhook.DefaultTolerance, t0); err != nil {
		t.Fatalf("VerifyAt(Sign(...)) = %v", err)
	}
	if err := webhook.Verify(secret, webhook.Sign(secret, []byte(body), time.Now()), []byte(body), webhook.DefaultTolerance); err != nil {
		t.Fatalf("Verify(Sign(now)) = %v", err)
	}
}

func TestSignKnownVector(t *testing.T) {
	got := webhook.Sign(secret, []byte(body), t0)
	want := "t=1700000000,v1=" + hmacHex(secret, "1700000000."+body)
	if got != want {
		t.Fatalf("Sign = %q\nwant   %q", got, want)
	}
	// Fixed independently: printf '%s' '1700000000.<body>' | openssl dgst -sha256 -hmac <secret>
	const openssl = "cbb09be1b4fc928acccaa687d4a8063eae454cc3ea59319aafa92d4b7b7b9137"
	if want != "t=1700000000,v1="+openssl {
		t.Fatalf("crypto/hmac and openssl disagree: %q", want)
	}
	// Sub-second parts of t are dropped, as the header carries seconds.
	if got := webhook.Sign(secret, []byte(body), t0.Add(999*time.Millisecond)); got != want {
		t.Fatalf("Sign with fractional second = %q, want %q", got, want)
	}
	// A header built by hand verifies.
	if err := webhook.VerifyAt(secret, want, []byte(body), 0, t0); err != nil {
		t.Fatalf("VerifyAt(known vector) = %v", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	h := webhook.Sign(secret, []byte(body), t0)
	cases := []struct {
		name   string
		secret string
		body   string
	}{
		{"wrong secret", "whsec_otherotherotherotherotherothe", body},
		{"secret without whsec_ prefix", strings.TrimPrefix(secret, "whsec_"), body},
		{"re-serialised body", secret, `{"type": "email.delivered", "data": {"email_id": "em_1"}}`},
		{"trailing newline", secret, body + "\n"},
		{"empty body", secret, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := webhook.VerifyAt(c.secret, h, []byte(c.body), webhook.DefaultTolerance, t0)
			if !errors.Is(err, webhook.ErrNoValidSignature) {
				t.Fatalf("err = %v, want ErrNoValidSignature", err)
			}
		})
	}
}

func TestVerifyEmptySecret(t *testing.T) {
	h := "t=1700000000,v1=" + hmacHex("", "1700000000."+body)
	if err := webhook.VerifyAt("", h, []byte(body), 0, t0); !errors.Is(err, webhook.ErrEmptySecret) {
		t.Fatalf("err = %v, want ErrEmptySecret", err)
	}
}

func TestVerifyTolerance(t *testing.T) {
	h := webhook.Sign(secret, []byte(body), t0)
	for _, c := range []struct {
		offset time.Duration // now - t
		ok     bool
	}{
		{0, true},
		{299 * time.Second, true},
		{-299 * time.Second, true},
		{300 * time.Second, true},
		{-300 * time.Second, true},
		{301 * time.Second, false},
		{-301 * time.Second, false},
		{300*time.Second + time.Millisecond, false},
		{24 * time.Hour, false},
	} {
		for _, tol := range []time.Duration{webhook.DefaultTolerance, 0} { // 0 means default
			err := webhook.VerifyAt(secret, h, []byte(body), tol, t0.Add(c.offset))
			if c.ok && err != nil {
				t.Errorf("offset %v tolerance %v: err = %v, want nil", c.offset, tol, err)
			}
			if !c.ok && !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
				t.Errorf("offset %v tolerance %v: err = %v, want ErrTimestampOutOfTolerance", c.offset, tol, err)
			}
		}
	}
	// A custom tolerance applies.
	if err := webhook.VerifyAt(secret, h, []byte(body), time.Minute, t0.Add(61*time.Second)); !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
		t.Errorf("tolerance 1m, 61s old: err = %v", err)
	}
	// An expired timestamp fails even when the signature over it is right.
	old := t0.Add(-301 * time.Second)
	if err := webhook.VerifyAt(secret, webhook.Sign(secret, []byte(body), old), []byte(body), 0, t0); !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
		t.Errorf("validly signed but old: err = %v", err)
	}
}

func TestVerifyMalformed(t *testing.T) {
	ts := strconv.FormatInt(t0.Unix(), 10)
	sig := hmacHex(secret, ts+"."+body)
	cases := []struct {
		name, header string
		want         error
	}{
		{"empty", "", webhook.ErrMissingHeader},
		{"blank", "   ", webhook.ErrMissingHeader},
		{"missing t", "v1=" + sig, webhook.ErrMalformedHeader},
		{"missing v1", "t=" + ts, webhook.ErrMalformedHeader},
		{"only unknown scheme", "t=" + ts + ",v0=" + sig, webhook.ErrMalformedHeader},
		{"non-numeric t", "t=abc,v1=" + sig, webhook.ErrMalformedHeader},
		{"negative t", "t=-" + ts + ",v1=" + sig, webhook.ErrMalformedHeader},
		{"signed t", "t=+" + ts + ",v1=" + sig, webhook.ErrMalformedHeader},
		{"fractional t", "t=" + ts + ".5,v1=" + sig, webhook.ErrMalformedHeader},
		{"empty t", "t=,v1=" + sig, webhook.ErrMalformedHeader},
		{"two t", "t=" + ts + ",t=" + ts + ",v1=" + sig, webhook.ErrMalformedHeader},
		{"not key=value", "t=" + ts + ",garbage,v1=" + sig, webhook.ErrMalformedHeader},
		{"huge t", "t=99999999999999999999999,v1=" + sig, webhook.ErrTimestampOutOfTolerance},
		{"max int64 t", "t=9223372036854775807,v1=" + sig, webhook.ErrTimestampOutOfTolerance},
		{"zero t", "t=0,v1=" + sig, webhook.ErrTimestampOutOfTolerance},
		{"v1 not hex", "t=" + ts + ",v1=zz", webhook.ErrNoValidSignature},
		{"v1 empty", "t=" + ts + ",v1=", webhook.ErrNoValidSignature},
		{"v1 truncated", "t=" + ts + ",v1=" + sig[:32], webhook.ErrNoValidSignature},
		{"v1 of another t", "t=" + ts + ",v1=" + hmacHex(secret, "1700000001."+body), webhook.ErrNoValidSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := webhook.VerifyAt(secret, c.header, []byte(body), 0, t0)
			if !errors.Is(err, c.want) {
				t.Fatalf("VerifyAt(%q) = %v, want %v", c.header, err, c.want)
			}
		})
	}
}

func TestVerifyAccepts(t *testing.T) {
	ts := strconv.FormatInt(t0.Unix(), 10)
	sig := hmacHex(secret, ts+"."+body)
	other := hmacHex("whsec_previous", ts+"."+body)
	for _, h := range []string{
		"t=" + ts + ",v1=" + sig,
		"v1=" + sig + ",t=" + ts, // order does not matter
		"t=" + ts + ",v1=" + other + ",v1=" + sig,
		"t=" + ts + ",v1=" + sig + ",v1=" + other,
		"t=" + ts + ",v1=nothex,v1=" + sig,
		"t=" + ts + ",v0=" + other + ",v1=" + sig + ",v2=future", // unknown schemes ignored
		"t=" + ts + ", v1=" + sig,                                // whitespace tolerated
		"t=" + ts + ",v1=" + strings.ToUpper(sig),
	} {
		if err := webhook.VerifyAt(secret, h, []byte(body), 0, t0); err != nil {
			t.Errorf("VerifyAt(%q) = %v, want nil", h, err)
		}
	}
}

func newRequest(t *testing.T, body, sig, deliveryID string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if sig != "" {
		r.Header.Set(webhook.HeaderSignature, sig)
	}
	r.Header.Set(webhook.HeaderEventType, "email.bounced")
	if deliveryID != "" {
		r.Header.Set(webhook.HeaderDeliveryID, deliveryID)
	}
	return r
}

const bounced = `{"type":"email.bounced","created_at":"2026-03-01T12:00:00.123Z","data":{` +
	`"email_id":"em_1","from":"Acme <hello@example.test>","to":"ann@example.org","subject":"Welcome",` +
	`"tags":{"campaign":"spring"},"bounce_type":"permanent","bounce_subtype":"general","future_field":1}}`

func TestHandler(t *testing.T) {
	type call struct {
		id string
		ev webhook.Event
	}
	var calls []call
	var fnErr error
	h := webhook.Handler(secret, func(ctx context.Context, id string, ev webhook.Event) error {
		if ctx == nil {
			t.Error("nil context")
		}
		calls = append(calls, call{id, ev})
		return fnErr
	})
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	good := webhook.Sign(secret, []byte(bounced), time.Now())

	t.Run("valid", func(t *testing.T) {
		calls = nil
		w := serve(newRequest(t, bounced, good, "dlv_1"))
		if w.Code != http.StatusNoContent {
			t.Fatalf("status %d, want 204; body %q", w.Code, w.Body)
		}
		if len(calls) != 1 {
			t.Fatalf("fn called %d times, want 1", len(calls))
		}
		c := calls[0]
		want := webhook.Event{
			Type:      "email.bounced",
			CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 123e6, time.UTC),
			Data: webhook.EventData{
				EmailID: "em_1", From: "Acme <hello@example.test>", To: "ann@example.org", Subject: "Welcome",
				Tags:       map[string]string{"campaign": "spring"},
				BounceType: "permanent", BounceSubtype: "general",
			},
		}
		if c.id != "dlv_1" {
			t.Errorf("deliveryID %q, want dlv_1", c.id)
		}
		if c.ev.Type != want.Type || !c.ev.CreatedAt.Equal(want.CreatedAt) ||
			c.ev.Data.EmailID != want.Data.EmailID || c.ev.Data.From != want.Data.From ||
			c.ev.Data.To != want.Data.To || c.ev.Data.Subject != want.Data.Subject ||
			c.ev.Data.Tags["campaign"] != "spring" || len(c.ev.Data.Tags) != 1 ||
			c.ev.Data.BounceType != want.Data.BounceType || c.ev.Data.BounceSubtype != want.Data.BounceSubtype ||
			c.ev.Data.Link != "" || c.ev.Data.Reason != "" {
			t.Errorf("event %+v\nwant  %+v", c.ev, want)
		}
	})

	for _, c := range []struct {
		name, sig, reason string
	}{
		{"bad signature", webhook.Sign("whsec_wrong", []byte(bounced), time.Now()), "invalid signature"},
		{"unprefixed secret", webhook.Sign(strings.TrimPrefix(secret, "whsec_"), []byte(bounced), time.Now()), "invalid signature"},
		{"no signature", "", "missing signature"},
		{"malformed", "v1=abcd", "malformed signature"},
		{"stale", webhook.Sign(secret, []byte(bounced), time.Now().Add(-301*time.Second)), "signature timestamp out of tolerance"},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls = nil
			w := serve(newRequest(t, bounced, c.sig, "dlv_1"))
			if w.Code != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", w.Code)
			}
			if got := strings.TrimSpace(w.Body.String()); got != c.reason {
				t.Errorf("body %q, want %q", got, c.reason)
			}
			if len(calls) != 0 {
				t.Error("fn called for an unverified delivery")
			}
		})
	}

	t.Run("tampered body", func(t *testing.T) {
		calls = nil
		w := serve(newRequest(t, strings.Replace(bounced, "permanent", "transient", 1), good, "dlv_1"))
		if w.Code != http.StatusUnauthorized || len(calls) != 0 {
			t.Fatalf("status %d, calls %d; want 401 and none", w.Code, len(calls))
		}
	})

	t.Run("fn error", func(t *testing.T) {
		calls = nil
		fnErr = errors.New("database is down: password=hunter2")
		defer func() { fnErr = nil }()
		w := serve(newRequest(t, bounced, good, "dlv_1"))
		if w.Code != http.StatusInternalServerError {
			t.Fatalf("status %d, want 500", w.Code)
		}
		if strings.Contains(w.Body.String(), "hunter2") {
			t.Errorf("fn's error leaked into the response: %q", w.Body)
		}
		if len(calls) != 1 {
			t.Errorf("fn called %d times, want 1", len(calls))
		}
	})

	t.Run("missing delivery id", func(t *testing.T) {
		calls = nil
		w := serve(newRequest(t, bounced, good, ""))
		if w.Code != http.StatusBadRequest || len(calls) != 0 {
			t.Fatalf("status %d, calls %d; want 400 and none", w.Code, len(calls))
		}
	})

	t.Run("signed but not JSON", func(t *testing.T) {
		calls = nil
		b := "not json"
		w := serve(newRequest(t, b, webhook.Sign(secret, []byte(b), time.Now()), "dlv_1"))
		if w.Code != http.StatusBadRequest || len(calls) != 0 {
			t.Fatalf("status %d, calls %d; want 400 and none", w.Code, len(calls))
		}
	})

	t.Run("body over 1 MiB", func(t *testing.T) {
		calls = nil
		b := `{"type":"email.sent","data":{"subject":"` + strings.Repeat("x", 1<<20) + `"}}`
		r := newRequest(t, b, webhook.Sign(secret, []byte(b), time.Now()), "dlv_1")
		r.ContentLength = -1 // unknown length: the cap must hold while reading
		w := serve(r)
		if w.Code != http.StatusRequestEntityTooLarge || len(calls) != 0 {
			t.Fatalf("status %d, calls %d; want 413 and none", w.Code, len(calls))
		}
	})

	t.Run("GET", func(t *testing.T) {
		w := serve(httptest.NewRequest(http.MethodGet, "/hook", nil))
		if w.Code != http.StatusMethodNotAllowed {
			t.Fatalf("status %d, want 405", w.Code)
		}
	})
}

// TestHandlerOverHTTP exercises a real server and client, under -race with
// concurrent deliveries.
func TestHandlerOverHTTP(t *testing.T) {
	got := make(chan string, 8)
	srv := httptest.NewServer(webhook.Handler(secret, func(_ context.Context, id string, ev webhook.Event) error {
		got <- id + " " + ev.Type
		return nil
	}))
	defer srv.Close()

	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(bounced))
			req.Header.Set(webhook.HeaderSignature, webhook.Sign(secret, []byte(bounced), time.Now()))
			req.Header.Set(webhook.HeaderDeliveryID, "dlv_"+strconv.Itoa(i))
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					err = errors.New(resp.Status)
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if len(got) != 8 {
		t.Fatalf("fn called %d times, want 8", len(got))
	}
}

func TestHandlerPanicsWithoutSecret(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Handler(\"\", fn) did not panic")
		}
	}()
	webhook.Handler("", func(context.Context, string, webhook.Event) error { return nil })
}

func TestEventWrittenAsReceiversReadIt(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 30, 0, 0, time.FixedZone("CET", 3600))
	email := webhook.EventData{EmailID: "e1", From: "A <a@example.com>", To: "b@example.com", Subject: "Hi", Tags: map[string]string{"k": "v"}}
	bounced, delivered := email, email
	bounced.BounceType, bounced.BounceSubtype, bounced.Recipients = "Permanent", "General", []string{"c@example.com"}
	delivered.Recipients = []string{"b@example.com"} // of a delivery that did not reach c@example.com
	const head = `"data":{"email_id":"e1","from":"A \u003ca@example.com\u003e","to":"b@example.com","subject":"Hi","tags":{"k":"v"}`
	for _, c := range []struct {
		ev   webhook.Event
		want string
	}{
		{webhook.Event{Type: webhook.TypeEmailBounced, CreatedAt: at, Data: bounced},
			`{"type":"email.bounced","created_at":"2026-03-01T08:30:00.000Z",` + head + `,"bounce_type":"Permanent","bounce_subtype":"General","recipients":["c@example.com"]}}`},
		{webhook.Event{Type: webhook.TypeEmailDelivered, CreatedAt: at, Data: delivered},
			`{"type":"email.delivered","created_at":"2026-03-01T08:30:00.000Z",` + head + `,"recipients":["b@example.com"]}}`},
	} {
		b, err := json.Marshal(c.ev)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Fatalf("written\n%s\nwant\n%s", b, c.want)
		}
		var back webhook.Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !back.CreatedAt.Equal(at) || back.Data.BounceSubtype != c.ev.Data.BounceSubtype || back.Data.Link != "" ||
			!slices.Equal(back.Data.Recipients, c.ev.Data.Recipients) {
			t.Fatalf("read back %+v", back)
		}
	}
}
