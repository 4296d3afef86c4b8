package app_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

func (w *hookWorld) endpointCount(t *testing.T) int {
	t.Helper()
	return len(w.Do("GET", "/v1/webhooks", w.key, nil).JSON(t)["data"].([]any))
}

// Racing creates cannot pass the limit: they meet on the account's slots
// stream.
func TestEndpointLimitUnderRacingCreates(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	var ids []string
	for i := range webhook.MaxEndpoints - 1 {
		id, _ := w.endpoint(t, map[string]any{"url": fmt.Sprint(rcv.URL, "/", i)})
		ids = append(ids, id)
	}
	const racers = 20
	statuses := make([]int, racers)
	codes := make([]string, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			r := w.Do("POST", "/v1/webhooks", w.key, map[string]any{"url": fmt.Sprint(rcv.URL, "/race/", i)})
			statuses[i] = r.Status
			var p struct{ Code string }
			json.Unmarshal(r.Body, &p)
			codes[i] = p.Code
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i, s := range statuses {
		switch {
		case s == 201:
			created++
		case s == 422 && codes[i] == "limit_exceeded":
		default:
			t.Fatalf("racer %d: %d %v", i, s, codes[i])
		}
	}
	if created != 1 {
		t.Fatalf("%d racing creates passed the limit, want 1 (statuses %v)", created, statuses)
	}
	if n := w.endpointCount(t); n != webhook.MaxEndpoints {
		t.Fatalf("the account lists %d endpoints", n)
	}
	// Deleting one frees its place at once, for one create only.
	if r := w.Do("DELETE", "/v1/webhooks/"+ids[0], w.key, nil); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	w.endpoint(t, map[string]any{"url": rcv.URL + "/after-delete"})
	wantProblem(t, w.Do("POST", "/v1/webhooks", w.key, map[string]any{"url": rcv.URL + "/one-more"}), 422, "limit_exceeded")
}

// appendEvents records events as an earlier version (or a crashed request)
// left them.
func (w *hookWorld) appendEvents(t *testing.T, stream string, evs ...domain.Event) {
	t.Helper()
	data, err := codec.EncodeAll(evs, eventstore.Metadata{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Store.Append(t.Context(), stream, eventstore.Any, data...); err != nil {
		t.Fatal(err)
	}
}

// Endpoints made before slots were recorded count: the account's first
// create seeds its slots from them.
func TestEndpointLimitCountsEarlierEndpoints(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	var old []string
	for i := range webhook.MaxEndpoints {
		id := uuid.NewString()
		w.appendEvents(t, webhook.Stream(id), &webhook.Created{EndpointID: id, AccountID: w.account, URL: fmt.Sprint(rcv.URL, "/", i),
			EventTypes: webhook.EventTypes, SealedSecret: "unused", CreatedAt: w.Clock.Now()})
		old = append(old, id)
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.endpointCount(t) != webhook.MaxEndpoints {
		if time.Now().After(deadline) {
			t.Fatal("the earlier endpoints never showed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantProblem(t, w.Do("POST", "/v1/webhooks", w.key, map[string]any{"url": rcv.URL + "/new"}), 422, "limit_exceeded")
	if r := w.Do("DELETE", "/v1/webhooks/"+old[3], w.key, nil); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	w.endpoint(t, map[string]any{"url": rcv.URL + "/new"})
	wantProblem(t, w.Do("POST", "/v1/webhooks", w.key, map[string]any{"url": rcv.URL + "/newer"}), 422, "limit_exceeded")
}

// A slot taken by a create that crashed before its endpoint was recorded
// holds its place for a minute only.
func TestCrashedCreateFreesItsSlot(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	for i := range webhook.MaxEndpoints - 1 {
		w.endpoint(t, map[string]any{"url": fmt.Sprint(rcv.URL, "/", i)})
	}
	w.appendEvents(t, webhook.SlotsStream(w.account),
		&webhook.SlotTaken{AccountID: w.account, EndpointID: uuid.NewString(), TakenAt: w.Clock.Now()})
	wantProblem(t, w.Do("POST", "/v1/webhooks", w.key, map[string]any{"url": rcv.URL + "/new"}), 422, "limit_exceeded")
	w.Clock.Advance(webhook.SlotGrace)
	w.endpoint(t, map[string]any{"url": rcv.URL + "/new"})
	wantProblem(t, w.Do("POST", "/v1/webhooks", w.key, map[string]any{"url": rcv.URL + "/newer"}), 422, "limit_exceeded")
	if n := w.endpointCount(t); n != webhook.MaxEndpoints {
		t.Fatalf("the account lists %d endpoints", n)
	}
}

// An unknown or another account's id is a 404 on every route that takes
// one, whatever the body or query: nothing is judged before the resource
// is found to be the caller's.
func TestForeignIDsBeforeValidation(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	mine, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	// The same requests on the caller's own endpoint are refused as invalid.
	wantProblem(t, w.Do("PATCH", "/v1/webhooks/"+mine, w.key, map[string]any{"url": "ftp://example.com/hook"}), 422, "validation_failed")
	wantProblem(t, w.Do("PATCH", "/v1/webhooks/"+mine, w.key, "{"), 400, "invalid_json")
	wantProblem(t, w.Do("GET", "/v1/webhooks/"+mine+"/deliveries?limit=abc", w.key, nil), 422, "validation_failed")

	otherAccount, otherAdmin, otherKey := w.Sender("other.test")
	theirs, _ := (&hookWorld{&sendWorld{Server: w.Server, account: otherAccount, admin: otherAdmin, key: otherKey}}).endpoint(t, map[string]any{"url": rcv.URL + "/theirs"})
	theirDomain := w.Do("GET", "/api/domains", otherAdmin, nil).JSON(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	theirKey := w.Do("GET", "/api/auth/api-keys", otherAdmin, nil).JSON(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	theirToken := w.Do("GET", "/api/auth/tokens", otherAdmin, nil).JSON(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	theirEmail := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string)
	unknown := uuid.NewString()

	for _, id := range []string{theirs, unknown, "not-an-id"} {
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{"PATCH", "/v1/webhooks/" + id, map[string]any{"url": "ftp://example.com/hook"}},
			{"PATCH", "/v1/webhooks/" + id, map[string]any{"url": "https://10.0.0.1/hook", "description": "two\nlines"}},
			{"PATCH", "/v1/webhooks/" + id, map[string]any{"event_types": []string{"email.exploded"}}},
			{"PATCH", "/v1/webhooks/" + id, map[string]any{"url": 5}},
			{"PATCH", "/v1/webhooks/" + id, "{"},
			{"GET", "/v1/webhooks/" + id + "/deliveries?limit=abc", nil},
			{"GET", "/v1/webhooks/" + id + "/deliveries?limit=0&status=lost", nil},
			{"GET", "/v1/webhooks/" + id, nil},
			{"DELETE", "/v1/webhooks/" + id, "{"},
			{"POST", "/v1/webhooks/" + id + "/rotate-secret", "{"},
			{"POST", "/v1/webhooks/" + id + "/test", "{"},
		} {
			r := w.Do(req.method, req.path, w.key, req.body)
			if r.Status != 404 {
				t.Fatalf("%s %s %v: %d %s", req.method, req.path, req.body, r.Status, r.Body)
			}
			wantProblem(t, r, 404, "not_found")
		}
	}
	// The other routes with an id take no body that could be judged; a
	// stray one changes nothing.
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/domains/" + theirDomain},
		{"POST", "/api/domains/" + theirDomain + "/verify"},
		{"POST", "/api/domains/" + theirDomain + "/upgrade"},
		{"POST", "/api/domains/" + theirDomain + "/rotate"},
		{"DELETE", "/api/domains/" + theirDomain},
		{"DELETE", "/api/auth/api-keys/" + theirKey},
		{"DELETE", "/api/auth/tokens/" + theirToken},
	} {
		wantProblem(t, w.Do(req.method, req.path, w.admin, "{"), 404, "not_found")
	}
	wantProblem(t, w.Do("GET", "/v1/emails/"+theirEmail, otherKey, nil), 404, "not_found")
	// Nothing of the other account changed.
	if ep := w.Do("GET", "/v1/webhooks/"+theirs, otherKey, nil).JSON(t); ep["url"] != rcv.URL+"/theirs" || ep["is_active"] != true {
		t.Fatalf("the other account's endpoint %v", ep)
	}
	if r := w.Do("GET", "/api/domains/"+theirDomain, otherAdmin, nil); r.Status != 200 {
		t.Fatalf("the other account's domain: %d", r.Status)
	}
}
