package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dnslib "github.com/miekg/dns"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/webhook"
)

// receiver is a real HTTP server recording what Mailroom posts to it.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []received
	respond  func(n int) int // status for the n-th request (1-based)
	sleep    time.Duration
	redirect string
}

type received struct {
	header http.Header
	body   []byte
	at     time.Time
}

func newReceiver(t *testing.T, respond func(n int) int) *receiver {
	r := &receiver{respond: respond}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{header: req.Header.Clone(), body: body, at: time.Now()})
		n := len(r.got)
		sleep, redirect := r.sleep, r.redirect
		r.mu.Unlock()
		if sleep > 0 {
			time.Sleep(sleep)
		}
		if redirect != "" {
			http.Redirect(w, req, redirect, http.StatusFound)
			return
		}
		w.WriteHeader(r.respond(n))
	}))
	t.Cleanup(r.Close)
	return r
}

func always(code int) func(int) int { return func(int) int { return code } }

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func (r *receiver) waitFor(t *testing.T, n int) []received {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := r.requests()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver got %d requests, want %d", len(got), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type hookWorld struct {
	*sendWorld
}

func newHookWorld(t *testing.T, configure ...func(*config.Config)) *hookWorld {
	return &hookWorld{newSendWorld(t, append([]func(*config.Config){func(c *config.Config) {
		c.WebhookRetries = "50ms,50ms,50ms,50ms,50ms,50ms"
	}}, configure...)...)}
}

func (w *hookWorld) endpoint(t *testing.T, body map[string]any) (id, secret string) {
	t.Helper()
	r := w.Do("POST", "/v1/webhooks", w.key, body)
	if r.Status != 201 {
		t.Fatalf("create endpoint: %d %s", r.Status, r.Body)
	}
	e := r.JSON(t)
	return e["id"].(string), e["secret"].(string)
}

func (w *hookWorld) deliveries(t *testing.T, endpoint, query string) []map[string]any {
	t.Helper()
	r := w.Do("GET", "/v1/webhooks/"+endpoint+"/deliveries"+query, w.key, nil)
	if r.Status != 200 {
		t.Fatalf("deliveries: %d %s", r.Status, r.Body)
	}
	var out []map[string]any
	for _, d := range r.JSON(t)["data"].([]any) {
		out = append(out, d.(map[string]any))
	}
	return out
}

func (w *hookWorld) waitDelivery(t *testing.T, endpoint, id, status string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, d := range w.deliveries(t, endpoint, "?limit=100") {
			if d["id"] == id && d["status"] == status {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s never became %s: %v", id, status, w.deliveries(t, endpoint, "?limit=100"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *hookWorld) test(t *testing.T, endpoint string) string {
	t.Helper()
	r := w.Do("POST", "/v1/webhooks/"+endpoint+"/test", w.key, nil)
	if r.Status != 202 || r.JSON(t)["status"] != "pending" {
		t.Fatalf("test: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["delivery_id"].(string)
}

func TestWebhookSignedDeliveries(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	id, secret := w.endpoint(t, map[string]any{"url": rcv.URL + "/hooks", "description": "orders"})
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q", secret)
	}
	list := w.Do("GET", "/v1/webhooks", w.key, nil)
	if strings.Contains(string(list.Body), secret) || strings.Contains(string(list.Body), `"secret"`) {
		t.Fatal("the list shows the secret")
	}
	lj := list.JSON(t)
	if fmt.Sprint(lj["event_types"]) != "[email.sent email.delivered email.opened email.clicked email.bounced email.complained email.failed]" {
		t.Fatalf("event_types %v", lj["event_types"])
	}
	ep := w.Do("GET", "/v1/webhooks/"+id, w.key, nil).JSON(t)
	if ep["is_active"] != true || ep["disabled_reason"] != nil || ep["consecutive_failures"] != 0.0 || ep["description"] != "orders" || len(ep["event_types"].([]any)) != 7 {
		t.Fatalf("endpoint %v", ep)
	}
	if _, ok := ep["secret"]; ok {
		t.Fatal("GET shows the secret")
	}

	emailID := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "Hooked", "text": "t", "tags": map[string]string{"k": "v"}})["id"].(string)
	got := rcv.waitFor(t, 2)
	types := map[string]bool{}
	for _, r := range got {
		if err := webhook.Verify(secret, r.header.Get("service-signature"), r.body, 300*time.Second); err != nil {
			t.Fatalf("signature does not verify: %v", err)
		}
		if webhook.Verify("whsec_wrong", r.header.Get("service-signature"), r.body, 300*time.Second) == nil {
			t.Fatal("a wrong secret verifies")
		}
		var ev map[string]any
		json.Unmarshal(r.body, &ev)
		data := ev["data"].(map[string]any)
		if ev["type"] != r.header.Get("service-event-type") || data["email_id"] != emailID || data["subject"] != "Hooked" ||
			data["to"] != "x@example.org" || data["from"] != "a@acme.test" || fmt.Sprint(data["tags"]) != "map[k:v]" || !timestamp.MatchString(ev["created_at"].(string)) {
			t.Fatalf("envelope %s headers %v", r.body, r.header)
		}
		if r.header.Get("service-delivery-id") == "" || !strings.HasPrefix(r.header.Get("User-Agent"), "Mailroom-Webhooks/") {
			t.Fatalf("headers %v", r.header)
		}
		types[ev["type"].(string)] = true
	}
	if !types["email.sent"] || !types["email.delivered"] {
		t.Fatalf("types %v", types)
	}
	ds := w.deliveries(t, id, "")
	if len(ds) != 2 {
		t.Fatalf("deliveries %v", ds)
	}
	for _, d := range ds {
		if d["email_id"] != emailID {
			t.Fatalf("delivery %v", d)
		}
		w.waitDelivery(t, id, d["id"].(string), "delivered")
	}
	// The provider's and the receiver's answer times are observed.
	m := string(w.Do("GET", "/metrics", "", nil).Body)
	for _, want := range []string{
		`mailroom_provider_send_duration_seconds_count{outcome="accepted"} 1` + "\n",
		`mailroom_webhook_attempt_duration_seconds_count{outcome="success"} 2` + "\n",
		`mailroom_webhook_attempt_duration_seconds_count{outcome="failure"} 0` + "\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	d := w.deliveries(t, id, "?status=delivered")[0]
	if d["attempts"] != 1.0 || d["response_status"] != 200.0 || d["error"] != nil || !timestamp.MatchString(d["delivered_at"].(string)) {
		t.Fatalf("delivered delivery %v", d)
	}
	if ep := w.Do("GET", "/v1/webhooks/"+id, w.key, nil).JSON(t); ep["last_success_at"] == nil {
		t.Fatal("last_success_at not set")
	}
	if n := len(w.deliveries(t, id, "?status=failed")); n != 0 {
		t.Fatalf("%d failed deliveries", n)
	}
	wantProblem(t, w.Do("GET", "/v1/webhooks/"+id+"/deliveries?status=lost", w.key, nil), 422, "validation_failed")

	// Rotation: the next delivery is signed with the new secret only.
	r := w.Do("POST", "/v1/webhooks/"+id+"/rotate-secret", w.key, nil)
	if r.Status != 200 || r.JSON(t)["id"] != id {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	newSecret := r.JSON(t)["secret"].(string)
	w.test(t, id)
	last := rcv.waitFor(t, 3)[2]
	if webhook.Verify(newSecret, last.header.Get("service-signature"), last.body, 300*time.Second) != nil {
		t.Fatal("not signed with the new secret")
	}
	if webhook.Verify(secret, last.header.Get("service-signature"), last.body, 300*time.Second) == nil {
		t.Fatal("still signed with the old secret")
	}
}

func TestWebhookRetriesUntilFailed(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(500))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	did := w.test(t, id)
	d := w.waitDelivery(t, id, did, "failed")
	got := rcv.requests()
	if d["attempts"] != 7.0 || len(got) != 7 || d["response_status"] != 500.0 || d["error"] != "receiver returned 500" {
		t.Fatalf("after retries: %v (%d requests)", d, len(got))
	}
	for _, r := range got {
		if r.header.Get("service-delivery-id") != did {
			t.Fatal("the delivery id changed across retries")
		}
	}
	// The endpoint hears of the exhausted event just after the delivery.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ep := w.Do("GET", "/v1/webhooks/"+id, w.key, nil).JSON(t)
		if ep["consecutive_failures"] == 1.0 {
			if ep["last_failure_at"] == nil || ep["is_active"] != true {
				t.Fatalf("endpoint after one exhausted event: %v", ep)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint after one exhausted event: %v", ep)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWebhookRedirectAndTimeout(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) { c.WebhookRetries = "1h" })
	target := newReceiver(t, always(200))
	redir := newReceiver(t, always(200))
	redir.redirect = target.URL
	id, _ := w.endpoint(t, map[string]any{"url": redir.URL})
	did := w.test(t, id)
	redir.waitFor(t, 1)
	deadline := time.Now().Add(60 * time.Second)
	var d map[string]any
	for d == nil || d["attempts"] != 1.0 {
		d = w.deliveries(t, id, "")[0]
		if time.Now().After(deadline) {
			t.Fatalf("delivery %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d["id"] != did || d["status"] != "pending" || d["response_status"] != 302.0 || d["error"] != "redirect 302 not followed" {
		t.Fatalf("after a redirect: %v", d)
	}
	if n := len(target.requests()); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}

	slow := newReceiver(t, always(200))
	slow.sleep = 11 * time.Second
	sid, _ := w.endpoint(t, map[string]any{"url": slow.URL})
	w.test(t, sid)
	deadline = time.Now().Add(30 * time.Second)
	for {
		ds := w.deliveries(t, sid, "")
		if len(ds) == 1 && ds[0]["attempts"] == 1.0 {
			if ds[0]["error"] != "timeout after 10s" || ds[0]["response_status"] != nil || ds[0]["status"] != "pending" {
				t.Fatalf("after a timeout: %v", ds[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no timed-out attempt: %v", ds)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWebhookAutoDisable(t *testing.T) {
	w := newHookWorld(t)
	failing := true
	var mu sync.Mutex
	rcv := newReceiver(t, func(int) int {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return 503
		}
		return 200
	})
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	exhaust := func(n int) {
		var ids []string
		for range n {
			ids = append(ids, w.test(t, id))
		}
		for _, did := range ids {
			w.waitDelivery(t, id, did, "failed")
		}
	}
	ep := func() map[string]any { return w.Do("GET", "/v1/webhooks/"+id, w.key, nil).JSON(t) }
	// The endpoint hears of a finished delivery just after the delivery.
	waitEP := func(what string, ok func(map[string]any) bool) map[string]any {
		deadline := time.Now().Add(60 * time.Second)
		for {
			e := ep()
			if ok(e) {
				return e
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, e)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	exhaust(19)
	if e := waitEP("after 19", func(e map[string]any) bool { return e["consecutive_failures"] == 19.0 }); e["is_active"] != true {
		t.Fatalf("after 19: %v", e)
	}
	// One success resets the count.
	mu.Lock()
	failing = false
	mu.Unlock()
	w.waitDelivery(t, id, w.test(t, id), "delivered")
	waitEP("success did not reset the count", func(e map[string]any) bool { return e["consecutive_failures"] == 0.0 })
	mu.Lock()
	failing = true
	mu.Unlock()
	exhaust(20)
	waitEP("not disabled after 20", func(e map[string]any) bool { return e["is_active"] == false })
	if e := ep(); e["disabled_reason"] != "consecutive_failures" || e["consecutive_failures"] != 20.0 {
		t.Fatalf("disabled endpoint %v", e)
	}
	wantProblem(t, w.Do("POST", "/v1/webhooks/"+id+"/test", w.key, nil), 409, "endpoint_inactive")
	r := w.Do("PATCH", "/v1/webhooks/"+id, w.key, map[string]any{"is_active": true})
	if r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	if e := r.JSON(t); e["is_active"] != true || e["consecutive_failures"] != 0.0 || e["disabled_reason"] != nil {
		t.Fatalf("re-enabled %v", e)
	}
}

func TestWebhookFilteringPausingAndLimits(t *testing.T) {
	w := newHookWorld(t)
	bounces := newReceiver(t, always(200))
	deliveries := newReceiver(t, always(200))
	paused := newReceiver(t, always(200))
	w.endpoint(t, map[string]any{"url": bounces.URL, "event_types": []string{"email.bounced"}})
	w.endpoint(t, map[string]any{"url": deliveries.URL, "event_types": []string{"email.delivered"}})
	pid, _ := w.endpoint(t, map[string]any{"url": paused.URL})
	r := w.Do("PATCH", "/v1/webhooks/"+pid, w.key, map[string]any{"is_active": false, "description": "paused for now"})
	if r.Status != 200 || r.JSON(t)["is_active"] != false || r.JSON(t)["disabled_reason"] != nil || r.JSON(t)["description"] != "paused for now" {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	wantProblem(t, w.Do("POST", "/v1/webhooks/"+pid+"/test", w.key, nil), 409, "endpoint_inactive")

	w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "ok@example.org", "subject": "s", "text": "t"})["id"].(string), status("delivered"))
	partial := w.send(t, map[string]any{"from": "a@acme.test", "to": "ok@example.org", "cc": "Bob <Bounce@simulator.amazonses.com>",
		"bcc": "Carol <carol@Example.NET>", "subject": "s", "text": "t"})["id"].(string)
	timeline := w.waitFor(t, partial, status("bounced"))
	got := bounces.waitFor(t, 1)
	var ev map[string]any
	json.Unmarshal(got[0].body, &ev)
	data := ev["data"].(map[string]any)
	if ev["type"] != "email.bounced" || data["bounce_type"] != "Permanent" || data["bounce_subtype"] != "General" {
		t.Fatalf("bounce event %s", got[0].body)
	}
	// The bounce names the address that bounced, not the email's to.
	if data["to"] != "ok@example.org" || fmt.Sprint(data["recipients"]) != "[Bounce@simulator.amazonses.com]" {
		t.Fatalf("bounce event's to %v and recipients %v", data["to"], data["recipients"])
	}
	// The delivery names who received the message (not the cc that
	// bounced), as the timeline's delivered event does.
	var delivered any
	for _, e := range timeline["events"].([]any) {
		if m := e.(map[string]any); m["event_type"] == "delivered" {
			delivered = m["metadata"].(map[string]any)["recipients"]
		}
	}
	var recipients any
	for _, r := range deliveries.waitFor(t, 2) {
		var ev struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		json.Unmarshal(r.body, &ev)
		if ev.Type == "email.delivered" && ev.Data["email_id"] == partial {
			recipients = ev.Data["recipients"]
		}
	}
	if fmt.Sprint(recipients) != "[ok@example.org carol@example.net]" || fmt.Sprint(recipients) != fmt.Sprint(delivered) {
		t.Fatalf("delivered webhook's recipients %v, timeline's %v", recipients, delivered)
	}
	// They are read from the sealed log, as a bounce's are: no job holds them.
	var jobs int
	if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE args::text ILIKE '%carol@example.net%'`).Scan(&jobs); err != nil || jobs != 0 {
		t.Fatalf("%d jobs hold a recipient (%v)", jobs, err)
	}
	// Give any stray delivery time to show up; none may.
	time.Sleep(300 * time.Millisecond)
	if n := len(bounces.requests()); n != 1 {
		t.Fatalf("the bounce-only endpoint got %d requests", n)
	}
	if n := len(paused.requests()); n != 0 {
		t.Fatalf("the paused endpoint got %d requests", n)
	}

	// Validation and the limit of 10.
	for _, body := range []map[string]any{
		{"url": "https://example.com", "description": strings.Repeat("d", 201)},
		{"url": "https://example.com", "event_types": []string{"email.exploded"}},
		{},
	} {
		wantProblem(t, w.Do("POST", "/v1/webhooks", w.key, body), 422, "validation_failed")
	}
	for i := 3; i < 10; i++ { // three endpoints above
		w.endpoint(t, map[string]any{"url": bounces.URL + fmt.Sprint("/", i)})
	}
	wantProblem(t, w.Do("POST", "/v1/webhooks", w.key, map[string]any{"url": bounces.URL + "/11"}), 422, "limit_exceeded")
}

func TestWebhookURLRefusals(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(dnscheck.Record{Type: "A", Name: "internal.hooks.test", Value: "10.1.2.3"},
		dnscheck.Record{Type: "A", Name: "rebind.hooks.test", Value: "93.184.216.34"})
	s := apptest.Start(t, func(c *config.Config) { c.EgressResolver = dns.Addr(); c.WebhookRetries = "1h" })
	_, _, key := s.Sender("acme.test")
	for _, url := range []string{
		"http://example.com/hook", "https://127.0.0.1/hook", "https://10.0.0.1/hook", "https://[::1]/hook",
		"https://[::ffff:127.0.0.1]/hook", "https://2130706433/hook", "https://localhost/hook", "https://169.254.169.254/latest",
		"https://internal.hooks.test/hook", "https://printer.local/", "https://svc.internal/",
	} {
		r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": url})
		wantProblem(t, r, 422, "validation_failed")
		if !strings.Contains(string(r.Body), `"field":"url"`) {
			t.Errorf("%s: %s", url, r.Body)
		}
	}
	// A URL without its scheme says what a URL must be, as an
	// attachment's path does.
	if r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": "hooks.example.com/mailroom"}); !strings.Contains(string(r.Body),
		`{"field":"url","message":"must be an https URL with a host, like https://hooks.example.com/mailroom"}`) {
		t.Errorf("a URL without its scheme: %d %s", r.Status, r.Body)
	}
	// A refused address is named with the request's other refusals, on
	// create and on change alike, not only once they are fixed.
	two := map[string]any{"url": "https://internal.hooks.test/hook", "description": strings.Repeat("d", 201)}
	if r := s.Do("POST", "/v1/webhooks", key, two); !strings.Contains(string(r.Body), `"field":"url"`) ||
		!strings.Contains(string(r.Body), `"field":"description"`) {
		t.Errorf("create wrong in url and description: %d %s", r.Status, r.Body)
	}
	// Public at creation, private at delivery: refused when connecting.
	r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": "https://rebind.hooks.test:1/hook"})
	if r.Status != 201 {
		t.Fatalf("public host refused: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	attemptError := func(now dnscheck.Record) string {
		t.Helper()
		dns.Remove("rebind.hooks.test", "A")
		dns.Remove("rebind.hooks.test", "CNAME")
		dns.Set(now)
		tr := s.Do("POST", "/v1/webhooks/"+id+"/test", key, nil)
		if tr.Status != 202 {
			t.Fatalf("test: %d", tr.Status)
		}
		did := tr.JSON(t)["delivery_id"]
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for _, d := range s.Do("GET", "/v1/webhooks/"+id+"/deliveries", key, nil).JSON(t)["data"].([]any) {
				if d := d.(map[string]any); d["id"] == did && d["attempts"] == 1.0 {
					return d["error"].(string)
				}
			}
		}
		t.Fatalf("no attempt of delivery %v", did)
		return ""
	}
	if e := attemptError(dnscheck.Record{Type: "A", Name: "rebind.hooks.test", Value: "127.0.0.1"}); e != "host does not resolve to a public address" {
		t.Fatalf("rebound delivery: %q", e)
	}
	two["event_types"] = []string{"email.nope"}
	if r := s.Do("PATCH", "/v1/webhooks/"+id, key, two); !strings.Contains(string(r.Body), `"field":"url"`) ||
		!strings.Contains(string(r.Body), `"field":"event_types.0"`) {
		t.Errorf("change wrong in url and event types: %d %s", r.Status, r.Body)
	}
	// A name pointed at an internal one after create tells nothing of
	// the internal names: one that exists and one that does not read
	// alike.
	exists := attemptError(dnscheck.Record{Type: "CNAME", Name: "rebind.hooks.test", Value: "internal.hooks.test"})
	missing := attemptError(dnscheck.Record{Type: "CNAME", Name: "rebind.hooks.test", Value: "nothere.hooks.test"})
	if exists != missing {
		t.Errorf("delivery errors tell an existing internal name (%q) from a missing one (%q)", exists, missing)
	}
}

// A restart while a retry waits: the retry still happens, once.
func TestWebhookRestartDuringRetryWait(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) { c.WebhookRetries = "1s,1s,1s,1s,1s,1s" })
	rcv := newReceiver(t, func(n int) int {
		if n == 1 {
			return 500
		}
		return 200
	})
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	did := w.test(t, id)
	rcv.waitFor(t, 1)
	// Restart while the retry waits: the retry still happens, once.
	cfg, clock := w.Config, w.Clock
	w.Stop()
	w.Server = apptest.StartWithClock(t, cfg, clock)
	w.waitDelivery(t, id, did, "delivered")
	time.Sleep(1500 * time.Millisecond) // a second retry would have come by now
	if n := len(rcv.requests()); n != 2 {
		t.Fatalf("receiver got %d requests, want 2", n)
	}
	if d := w.deliveries(t, id, "")[0]; d["attempts"] != 2.0 {
		t.Fatalf("delivery %v", d)
	}
}

// An endpoint deleted while a retry waits gets nothing more: the retry,
// when due, finds the endpoint gone.
func TestWebhookDeleteDuringRetryWait(t *testing.T) {
	// A wait the DELETE lands in however slow the machine.
	w := newHookWorld(t, func(c *config.Config) { c.WebhookRetries = "5s,5s,5s,5s,5s,5s" })
	failing := newReceiver(t, always(500))
	fid, _ := w.endpoint(t, map[string]any{"url": failing.URL})
	w.test(t, fid)
	failing.waitFor(t, 1)
	if r := w.Do("DELETE", "/v1/webhooks/"+fid, w.key, nil); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	w.waitForAttemptJobs(t, fid)
	if n := len(failing.requests()); n != 1 {
		t.Fatalf("the deleted endpoint got %d requests", n)
	}
	wantProblem(t, w.Do("GET", "/v1/webhooks/"+fid+"/deliveries", w.key, nil), 404, "not_found")
	var left int
	w.Pool.QueryRow(t.Context(), "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1", fid).Scan(&left)
	if left != 0 {
		t.Fatalf("%d deliveries of the deleted endpoint remain", left)
	}
}

// waitForAttemptJobs waits until no attempt of endpoint is left to run:
// the retries queued so far have run, whatever they found.
func (w *hookWorld) waitForAttemptJobs(t *testing.T, endpoint string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var pending int
		if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'webhook_attempt'
			AND args->>'endpoint_id' = $1 AND state NOT IN ('completed', 'cancelled', 'discarded')`, endpoint).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts of endpoint %s still to run", pending, endpoint)
		}
	}
}

// An endpoint that stops subscribing to a type gets no more retries of
// that type's pending deliveries: they end failed, unattempted, and count
// nothing against the endpoint. A test event goes to any endpoint, whatever
// it subscribes to.
func TestUnsubscribingEndsPendingRetries(t *testing.T) {
	// A wait the PATCH lands in however slow the machine.
	w := newHookWorld(t, func(c *config.Config) { c.WebhookRetries = "5s,5s,5s,5s,5s,5s" })
	rcv := newReceiver(t, always(500))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL, "event_types": []string{"email.delivered", "email.bounced"}})
	w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})
	rcv.waitFor(t, 1)
	did := w.deliveries(t, id, "")[0]["id"].(string) // the email.delivered
	if r := w.Do("PATCH", "/v1/webhooks/"+id, w.key, map[string]any{"event_types": []string{"email.bounced"}}); r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	d := w.waitDelivery(t, id, did, "failed")
	if d["attempts"] != 1.0 || d["error"] != "not delivered: the endpoint no longer subscribes to this event type" {
		t.Fatalf("delivery after unsubscribing: %v", d)
	}
	w.waitForAttemptJobs(t, id)
	if n := len(rcv.requests()); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}
	if ep := w.Do("GET", "/v1/webhooks/"+id, w.key, nil).JSON(t); ep["consecutive_failures"] != 0.0 || ep["is_active"] != true {
		t.Fatalf("endpoint: %v", ep)
	}

	bounces := newReceiver(t, always(200))
	other, _ := w.endpoint(t, map[string]any{"url": bounces.URL, "event_types": []string{"email.bounced"}})
	w.waitDelivery(t, other, w.test(t, other), "delivered")
}

func TestWebhooksOfAnotherAccount(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	_, _, otherKey := w.Sender("other.test")
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/webhooks/" + id}, {"PATCH", "/v1/webhooks/" + id}, {"DELETE", "/v1/webhooks/" + id},
		{"POST", "/v1/webhooks/" + id + "/rotate-secret"}, {"POST", "/v1/webhooks/" + id + "/test"},
		{"GET", "/v1/webhooks/" + id + "/deliveries"},
	} {
		var body any
		if req.method == "PATCH" {
			body = map[string]any{"description": "mine now"}
		}
		wantProblem(t, w.Do(req.method, req.path, otherKey, body), 404, "not_found")
	}
	if n := len(w.Do("GET", "/v1/webhooks", otherKey, nil).JSON(t)["data"].([]any)); n != 0 {
		t.Fatalf("the other account lists %d endpoints", n)
	}
	// Webhook routes need both permissions.
	reader := w.Do("POST", "/api/auth/api-keys", w.admin, map[string]any{"name": "r", "permissions": []string{"emails:read"}}).JSON(t)["key"].(string)
	r := w.Do("GET", "/v1/webhooks", reader, nil)
	wantProblem(t, r, 403, "permission_denied")
	if d := r.JSON(t)["detail"]; d != "this route needs an API key with emails:send and emails:read; this one lacks emails:send" {
		t.Errorf("detail: %v", d)
	}
}

// A PATCH racing a DELETE of its endpoint answers 200 (it came first) or
// 404 (the endpoint is gone), never a 500.
func TestWebhookPatchRacingDelete(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	for round := range 8 {
		id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
		codes := make([]int, 5)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				if i == 0 {
					codes[i] = w.Do("DELETE", "/v1/webhooks/"+id, w.key, nil).Status
					return
				}
				codes[i] = w.Do("PATCH", "/v1/webhooks/"+id, w.key, map[string]any{"description": fmt.Sprint("x", i)}).Status
			})
		}
		wg.Wait()
		if codes[0] != 204 {
			t.Fatalf("round %d: DELETE answered %d", round, codes[0])
		}
		for i, c := range codes[1:] {
			if c != 200 && c != 404 {
				t.Fatalf("round %d: PATCH %d answered %d beside a DELETE", round, i+1, c)
			}
		}
	}
}

// A receiver that never answers holds only its own deliveries: another
// endpoint's events still arrive. The receiver time-out is lengthened to a
// minute (an attempt's own bound), past the waits below, so no held attempt
// ends (and is retried) however slow the machine: held counts the attempts
// in flight at once.
func TestSlowEndpointDelaysNoOther(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) { c.WebhookTimeout = time.Minute })
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	held := 0
	slow := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		held++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		rw.WriteHeader(204)
	}))
	defer slow.Close()
	defer unblock() // before Close, which waits for the handlers
	fast := newReceiver(t, always(204))
	sid, _ := w.endpoint(t, map[string]any{"url": slow.URL})
	fid, _ := w.endpoint(t, map[string]any{"url": fast.URL})
	for range 30 {
		w.test(t, sid)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		h := held
		mu.Unlock()
		if h > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow receiver got nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	did := w.test(t, fid)
	fast.waitFor(t, 1)
	w.waitDelivery(t, fid, did, "delivered")
	mu.Lock()
	h := held
	mu.Unlock()
	if h > 8 { // an endpoint's share: half its account's 16
		t.Fatalf("the slow endpoint holds %d attempts at once, more than its share", h)
	}
	unblock()
}

// Everything an endpoint stores is bounded and printable, on create and
// on PATCH.
func TestWebhookInputBounds(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	url := func(n int) string { return rcv.URL + "/" + strings.Repeat("p", n-len(rcv.URL)-1) }
	id, _ := w.endpoint(t, map[string]any{"url": url(2048), "description": "Ümlaut — 日本"})
	cases := []struct {
		name  string
		body  any // a map, or a raw JSON string
		field string
	}{
		{"2,049-byte url", map[string]any{"url": url(2049)}, "url"},
		{"NUL in url", map[string]any{"url": rcv.URL + "/a\u0000"}, "url"},
		{"NUL in description", map[string]any{"url": rcv.URL, "description": "a\u0000b"}, "description"},
		{"line break in description", map[string]any{"url": rcv.URL, "description": "two\nlines"}, "description"},
		{"C1 control in description", map[string]any{"url": rcv.URL, "description": "x\u009b"}, "description"},
		{"invalid UTF-8 in description", `{"url":"` + rcv.URL + `","description":"caf` + "\xe9" + `"}`, "description"},
		{"control character in an event type", map[string]any{"url": rcv.URL, "event_types": []string{"email.sent", "email.\u0000"}}, "event_types.1"},
	}
	for _, tc := range cases {
		for _, req := range []struct{ method, path string }{{"POST", "/v1/webhooks"}, {"PATCH", "/v1/webhooks/" + id}} {
			r := w.Do(req.method, req.path, w.key, tc.body)
			wantProblem(t, r, 422, "validation_failed")
			if !strings.Contains(string(r.Body), fmt.Sprintf(`"field":%q`, tc.field)) {
				t.Errorf("%s %s: error does not name %s: %s", req.method, tc.name, tc.field, r.Body)
			}
		}
	}
	// Nothing was stored by the refused requests.
	if list := w.Do("GET", "/v1/webhooks", w.key, nil).JSON(t)["data"].([]any); len(list) != 1 ||
		list[0].(map[string]any)["url"] != url(2048) || list[0].(map[string]any)["description"] != "Ümlaut — 日本" {
		t.Fatalf("endpoints after refusals: %v", list)
	}
}

// A refusal of a host name that resolves to a private address says so
// without the address the resolver gave.
func TestWebhookRefusalQuotesNoAddress(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(dnscheck.Record{Type: "A", Name: "db.hooks.test", Value: "10.96.0.7"})
	s := apptest.Start(t, func(c *config.Config) { c.EgressResolver = dns.Addr() })
	_, _, key := s.Sender("acme.test")
	r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": "https://db.hooks.test/hook"})
	wantProblem(t, r, 422, "validation_failed")
	if !strings.Contains(string(r.Body), "host does not resolve to a public address") || strings.Contains(string(r.Body), "10.96") {
		t.Fatalf("refusal: %s", r.Body)
	}
}

// A URL whose host name cannot be looked up just now (the resolver fails)
// is not the client's mistake: 503 lookup_unavailable with Retry-After,
// nothing recorded, and the same request succeeds once the resolver answers.
func TestURLWhoseHostCannotBeLookedUpIsRetried(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(dnscheck.Record{Type: "A", Name: "hooks.example", Value: "192.0.2.80"})
	s := apptest.Start(t, func(c *config.Config) {
		c.EgressResolver = dns.Addr()
		c.EgressAllowCIDRs = "192.0.2.0/24"
	})
	_, _, key := s.Sender("acme.test")
	dns.FailWith(dnslib.RcodeServerFailure)
	for _, c := range []struct {
		path, field string
		body        map[string]any
	}{
		{"/v1/webhooks", "url", map[string]any{"url": "https://hooks.example/h"}},
		{"/v1/emails/send", "attachments.0.path", map[string]any{"from": "a@acme.test", "to": "b@example.org", "subject": "s", "text": "t",
			"attachments": []map[string]any{{"path": "https://hooks.example/a.pdf"}}}},
	} {
		r := s.Do("POST", c.path, key, c.body)
		wantProblem(t, r, 503, "lookup_unavailable")
		if r.Header.Get("Retry-After") != "5" || !strings.Contains(string(r.Body), c.field) {
			t.Errorf("%s: Retry-After %q, %s", c.path, r.Header.Get("Retry-After"), r.Body)
		}
	}
	if n := len(s.Do("GET", "/v1/emails", key, nil).JSON(t)["data"].([]any)); n != 0 {
		t.Fatalf("%d emails recorded", n)
	}
	// A request wrong in another field too hears of that field: the
	// lookup with no answer does not hide it.
	r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": "https://hooks.example/h", "description": strings.Repeat("d", 201)})
	wantProblem(t, r, 422, "validation_failed")
	if !strings.Contains(string(r.Body), `"field":"description"`) {
		t.Errorf("a lookup with no answer hides the description's refusal: %s", r.Body)
	}
	dns.FailWith(0)
	if r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": "https://hooks.example/h"}); r.Status != 201 {
		t.Fatalf("once the resolver answers: %d %s", r.Status, r.Body)
	}
}

// The host names of an email's attachment URLs are looked up side by side:
// with a resolver that takes seconds to answer, a send naming many hosts
// that do not resolve gets its 422 naming each of them, long before the
// server would give up on writing the answer.
func TestManyURLsOnASlowResolverAnswerInTime(t *testing.T) {
	dns := dnstest.Start(t)
	s := apptest.Start(t, func(c *config.Config) {
		c.EgressResolver = dns.Addr()
		c.HTTPReadTimeout, c.HTTPWriteTimeout = 20*time.Second, 30*time.Second
	})
	_, _, key := s.Sender("acme.test")
	dns.SetDelay(3 * time.Second)
	defer dns.SetDelay(0)
	var attachments []map[string]any
	for i := range 12 {
		attachments = append(attachments, map[string]any{"path": fmt.Sprintf("https://files-%d.example/a.pdf", i)})
	}
	r := s.Do("POST", "/v1/emails/send", key, map[string]any{"from": "a@acme.test", "to": "b@example.org", "subject": "s", "text": "t",
		"attachments": attachments})
	wantProblem(t, r, 422, "validation_failed")
	for i := range attachments {
		if field := fmt.Sprintf(`"attachments.%d.path"`, i); !strings.Contains(string(r.Body), field) {
			t.Fatalf("%s is not named: %s", field, r.Body)
		}
	}
}

// The delivery log pages newest first: after= the last id of a page gives
// the next, has_more says whether there is one, and every delivery is
// listed once. An after that names no delivery of the endpoint is a 422.
func TestDeliveriesArePaged(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(204))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	other, _ := w.endpoint(t, map[string]any{"url": rcv.URL + "/other", "event_types": []string{"email.sent"}})
	for i := range 4 {
		w.send(t, map[string]any{"from": "a@acme.test", "to": fmt.Sprintf("p%d@example.org", i), "subject": "s", "text": "t"})
	}
	rcv.waitFor(t, 12) // sent and delivered of 4 emails here, sent of 4 there
	// Each is recorded delivered once its receiver has answered: the
	// status filter below counts on all of them.
	w.waitDeliveries(t, id, 8, func(d map[string]any) bool { return d["status"] == "delivered" })
	all := w.Do("GET", "/v1/webhooks/"+id+"/deliveries?limit=100", w.key, nil).JSON(t)
	if len(all["data"].([]any)) != 8 || all["has_more"] != false {
		t.Fatalf("one page of everything: %d deliveries, has_more %v", len(all["data"].([]any)), all["has_more"])
	}
	var paged []string
	after := ""
	for range 10 {
		r := w.Do("GET", "/v1/webhooks/"+id+"/deliveries?limit=3"+after, w.key, nil).JSON(t)
		page := r["data"].([]any)
		for _, d := range page {
			paged = append(paged, d.(map[string]any)["id"].(string))
		}
		if r["has_more"] != true {
			break
		}
		after = "&after=" + paged[len(paged)-1]
	}
	var want []string
	for _, d := range all["data"].([]any) {
		want = append(want, d.(map[string]any)["id"].(string))
	}
	if fmt.Sprint(paged) != fmt.Sprint(want) {
		t.Fatalf("paged by 3: %v\nin one page: %v", paged, want)
	}
	if r := w.Do("GET", "/v1/webhooks/"+id+"/deliveries?status=delivered&limit=2&after="+want[0], w.key, nil).JSON(t); len(r["data"].([]any)) != 2 {
		t.Fatalf("a filtered page after the newest: %v", r)
	}
	otherDelivery := w.Do("GET", "/v1/webhooks/"+other+"/deliveries", w.key, nil).JSON(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	for _, bad := range []string{"nothing", otherDelivery} {
		wantProblem(t, w.Do("GET", "/v1/webhooks/"+id+"/deliveries?after="+bad, w.key, nil), 422, "validation_failed")
	}
	// A cursor or filter given twice is refused, not half taken.
	for _, q := range []string{"after=" + want[0] + "&after=" + want[1], "status=failed&status=delivered", "limit=2&limit=3"} {
		wantProblem(t, w.Do("GET", "/v1/webhooks/"+id+"/deliveries?"+q, w.key, nil), 422, "validation_failed")
	}
}

// An id written in capitals, as some databases and languages print UUIDs,
// names the same email, endpoint and delivery (UUIDs are read without
// regard to case); a changed id still names nothing.
func TestIDsInCapitalsNameTheSameThing(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	endpoint, _ := w.endpoint(t, map[string]any{"url": rcv.URL, "event_types": []string{"email.delivered"}})
	first := w.test(t, endpoint)
	second := w.test(t, endpoint)
	up := strings.ToUpper
	if r := w.Do("GET", "/v1/webhooks/"+up(endpoint), w.key, nil); r.Status != 200 || r.JSON(t)["id"] != endpoint {
		t.Fatalf("endpoint by its id in capitals: %d %s", r.Status, r.Body)
	}
	if after := w.deliveries(t, up(endpoint), "?after="+up(second)); len(after) != 1 || after[0]["id"] != first {
		t.Fatalf("deliveries after %s, in capitals: %v", second, after)
	}
	emailID := w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "s", "text": "t"})["id"].(string)
	if r := w.Do("GET", "/v1/emails/"+up(emailID), w.key, nil); r.Status != 200 || r.JSON(t)["id"] != emailID {
		t.Fatalf("email by its id in capitals: %d %s", r.Status, r.Body)
	}
	wantProblem(t, w.Do("GET", "/v1/emails/"+up(emailID[:35])+"X", w.key, nil), 404, "not_found")
}
