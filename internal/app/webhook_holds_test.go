package app_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/webhook"
)

// waitDeliveries polls an endpoint's deliveries until there are n and each
// satisfies ok.
func (w *hookWorld) waitDeliveries(t *testing.T, endpoint string, n int, ok func(map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds := w.deliveries(t, endpoint, "?limit=100")
		all := len(ds) == n
		for _, d := range ds {
			all = all && ok(d)
		}
		if all {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of %s: %v", endpoint, ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *hookWorld) patch(t *testing.T, endpoint string, body map[string]any) map[string]any {
	t.Helper()
	r := w.Do("PATCH", "/v1/webhooks/"+endpoint, w.key, body)
	if r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)
}

func unattempted(status, errText string) func(map[string]any) bool {
	return func(d map[string]any) bool {
		e, _ := d["error"].(string)
		return d["status"] == status && d["attempts"] == 0.0 && d["response_status"] == nil && e == errText
	}
}

// An email sent while its endpoint is paused reaches the receiver once,
// signed with the secret of the moment, when the endpoint is resumed.
func TestPausedEndpointHoldsEvents(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	id, oldSecret := w.endpoint(t, map[string]any{"url": rcv.URL})
	if ep := w.patch(t, id, map[string]any{"is_active": false}); ep["is_active"] != false || ep["disabled_reason"] != nil {
		t.Fatalf("paused endpoint %v", ep)
	}
	// Another paused endpoint is deleted with its held deliveries.
	gone := newReceiver(t, always(200))
	goneID, _ := w.endpoint(t, map[string]any{"url": gone.URL})
	w.patch(t, goneID, map[string]any{"is_active": false})

	emailID := w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "While paused", "text": "t"})["id"].(string)
	w.waitFor(t, emailID, status("delivered"))
	// Both events wait as pending deliveries, never attempted.
	held := w.waitDeliveries(t, id, 2, unattempted("pending", ""))
	w.waitDeliveries(t, goneID, 2, unattempted("pending", ""))
	time.Sleep(300 * time.Millisecond) // a stray attempt would have come by now
	if n := len(rcv.requests()) + len(gone.requests()); n != 0 {
		t.Fatalf("the paused endpoints got %d requests", n)
	}
	if r := w.Do("DELETE", "/v1/webhooks/"+goneID, w.key, nil); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	var left int
	if err := w.Pool.QueryRow(t.Context(), "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1", goneID).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d deliveries of the deleted endpoint remain (%v)", left, err)
	}
	// The secret changes while paused: the held events are signed with the new one.
	newSecret := w.Do("POST", "/v1/webhooks/"+id+"/rotate-secret", w.key, nil).JSON(t)["secret"].(string)

	if ep := w.patch(t, id, map[string]any{"is_active": true}); ep["is_active"] != true {
		t.Fatalf("resumed endpoint %v", ep)
	}
	rcv.waitFor(t, 2)
	for _, d := range held {
		w.waitDelivery(t, id, d["id"].(string), "delivered")
	}
	time.Sleep(300 * time.Millisecond) // a second delivery of either would have come by now
	got := rcv.requests()
	if len(got) != 2 {
		t.Fatalf("the resumed endpoint got %d requests, want 2", len(got))
	}
	types, ids := map[string]bool{}, map[string]bool{}
	for _, r := range got {
		if err := webhook.Verify(newSecret, r.header.Get("service-signature"), r.body, webhook.DefaultTolerance); err != nil {
			t.Fatalf("signature does not verify with the current secret: %v", err)
		}
		if webhook.Verify(oldSecret, r.header.Get("service-signature"), r.body, webhook.DefaultTolerance) == nil {
			t.Fatal("signed with the secret of when the event happened")
		}
		var ev map[string]any
		json.Unmarshal(r.body, &ev)
		if ev["data"].(map[string]any)["email_id"] != emailID || ev["data"].(map[string]any)["subject"] != "While paused" {
			t.Fatalf("envelope %s", r.body)
		}
		types[ev["type"].(string)] = true
		ids[r.header.Get("service-delivery-id")] = true
	}
	if !types["email.sent"] || !types["email.delivered"] || len(ids) != 2 {
		t.Fatalf("types %v, delivery ids %v", types, ids)
	}
	for _, d := range w.deliveries(t, id, "") {
		if d["attempts"] != 1.0 || d["response_status"] != 200.0 {
			t.Fatalf("delivery after resume %v", d)
		}
	}
	if n := len(gone.requests()); n != 0 {
		t.Fatalf("the deleted endpoint got %d requests", n)
	}
}

// Held deliveries older than the cap end failed with the reason, and a
// later resume does not send them.
func TestHeldDeliveriesExpire(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	w.patch(t, id, map[string]any{"is_active": false})
	w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "s", "text": "t"})["id"].(string), status("delivered"))
	w.waitDeliveries(t, id, 2, unattempted("pending", ""))

	w.Clock.Advance(delivery.HoldCap - time.Minute)
	time.Sleep(500 * time.Millisecond) // several polls of the dispatcher
	w.waitDeliveries(t, id, 2, unattempted("pending", ""))

	w.Clock.Advance(2 * time.Minute)
	w.waitDeliveries(t, id, 2, unattempted("failed", "held longer than 72h while the endpoint was paused"))
	w.patch(t, id, map[string]any{"is_active": true})
	time.Sleep(500 * time.Millisecond)
	if n := len(rcv.requests()); n != 0 {
		t.Fatalf("expired deliveries reached the receiver: %d requests", n)
	}
	if ds := w.deliveries(t, id, "?status=failed"); len(ds) != 2 {
		t.Fatalf("failed deliveries %v", ds)
	}
}

// Events of an endpoint disabled after failures are recorded as skipped,
// marked for recovery, and not sent when the endpoint is enabled again.
func TestDisabledEndpointSkipsEvents(t *testing.T) {
	w := newHookWorld(t)
	var mu sync.Mutex
	code := 500
	rcv := newReceiver(t, func(int) int {
		mu.Lock()
		defer mu.Unlock()
		return code
	})
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	var tests []string
	for range 20 {
		tests = append(tests, w.test(t, id))
	}
	for _, did := range tests {
		w.waitDelivery(t, id, did, "failed")
	}
	deadline := time.Now().Add(60 * time.Second)
	for ep := w.Do("GET", "/v1/webhooks/"+id, w.key, nil).JSON(t); ep["disabled_reason"] != "consecutive_failures"; ep = w.Do("GET", "/v1/webhooks/"+id, w.key, nil).JSON(t) {
		if time.Now().After(deadline) {
			t.Fatalf("endpoint not disabled: %v", ep)
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := len(rcv.requests())

	emailID := w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "s", "text": "t"})["id"].(string)
	w.waitFor(t, emailID, status("delivered"))
	var skipped []map[string]any
	deadline = time.Now().Add(20 * time.Second)
	for len(skipped) != 2 {
		skipped = nil
		for _, d := range w.deliveries(t, id, "?limit=100") {
			if d["email_id"] == emailID {
				skipped = append(skipped, d)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of the email: %v", skipped)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, d := range skipped {
		if !unattempted("failed", "endpoint disabled after consecutive failures")(d) {
			t.Fatalf("skipped delivery %v", d)
		}
		// The delivery's history carries the marker a recovery looks for.
		recs, err := w.Store.ReadStream(t.Context(), delivery.Stream(d["id"].(string)), 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, r := range recs {
			types = append(types, r.Type)
		}
		if len(types) != 2 || types[1] != "WebhookDeliverySkipped" {
			t.Fatalf("events of a skipped delivery: %v", types)
		}
	}

	mu.Lock()
	code = 200
	mu.Unlock()
	if ep := w.patch(t, id, map[string]any{"is_active": true}); ep["is_active"] != true || ep["disabled_reason"] != nil {
		t.Fatalf("enabled endpoint %v", ep)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(rcv.requests()); n != before {
		t.Fatalf("the receiver got %d requests after the endpoint was enabled", n-before)
	}
	// New events go out again.
	w.waitDelivery(t, id, w.test(t, id), "delivered")
}
