package app_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/webhook"
)

// One account whose ten endpoints answer only after 9 s (the receiver
// time-out is 10 s) holds its own share of attempts, not the process's:
// another account's webhook arrives while the slow ones are all pending.
func TestSlowAccountDelaysNoOtherAccount(t *testing.T) {
	w := newHookWorld(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	var mu sync.Mutex
	arrived, answered := 0, 0
	slow := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		mu.Unlock()
		select {
		case <-release:
		case <-time.After(9 * time.Second):
		}
		mu.Lock()
		answered++
		mu.Unlock()
		rw.WriteHeader(204)
	}))
	defer slow.Close()
	for i := range 10 {
		w.endpoint(t, map[string]any{"url": slow.URL + "/" + string(rune('a'+i))})
	}
	otherKey, fastID, fast := w.otherAccountsEndpoint(t)

	// Each email's sent and delivered events go to all ten: more attempts
	// than the process runs at once.
	for range 7 {
		w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "s", "text": "t"})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := arrived
		mu.Unlock()
		if n >= 16 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow endpoints got %d requests", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := w.Do("POST", "/v1/webhooks/"+fastID+"/test", otherKey, nil); r.Status != 202 {
		t.Fatalf("test: %d %s", r.Status, r.Body)
	}
	fast.waitFor(t, 1)
	mu.Lock()
	a, n := answered, arrived
	mu.Unlock()
	if a != 0 {
		t.Fatalf("the other account's webhook waited for %d slow answers", a)
	}
	if n > 16 {
		t.Fatalf("the slow account has %d attempts in flight, more than its share", n)
	}
	unblock()
}

// otherAccountsEndpoint makes another account, with an endpoint answering
// 204, and returns its API key, the endpoint's id and its receiver.
func (w *hookWorld) otherAccountsEndpoint(t *testing.T) (key, endpointID string, r *receiver) {
	t.Helper()
	_, _, key = w.Sender("other.test")
	r = newReceiver(t, always(204))
	resp := w.Do("POST", "/v1/webhooks", key, map[string]any{"url": r.URL})
	if resp.Status != 201 {
		t.Fatalf("other account's endpoint: %d %s", resp.Status, resp.Body)
	}
	return key, resp.JSON(t)["id"].(string), r
}

// Two worker processes on one database both make attempts: with two
// attempts each at most, four in flight at once need both.
func TestTwoWorkerProcessesShareAttempts(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) { c.WebhookConcurrency = 2 })
	other := apptest.StartWithClock(t, w.Config, w.Clock)
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	var mu sync.Mutex
	inFlight := 0
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if inFlight++; inFlight == 4 {
			once.Do(func() { close(release) })
		}
		mu.Unlock()
		<-release
		rw.WriteHeader(204)
	}))
	defer srv.Close()
	id, _ := w.endpoint(t, map[string]any{"url": srv.URL})
	var ids []string
	for range 4 {
		ids = append(ids, w.test(t, id))
	}
	// A process slow to start costs the first attempts their 10 s time-out
	// and a retry; either way, four at once need both processes.
	for _, did := range ids {
		w.waitDelivery(t, id, did, "delivered")
	}
	for i, s := range []*apptest.Server{w.Server, other} {
		if n := testutil.ToFloat64(s.Outcomes.Attempts.WithLabelValues("success")); n == 0 {
			t.Fatalf("process %d made no attempt", i+1)
		}
	}
}

// A receiver's Retry-After on a 429 holds the retry back for as long as it
// asks (the schedule's own first wait here is 50 ms).
func TestWebhookRetryAfterIsHonoured(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) { c.WebhookRetries = "50ms,1h" })
	rcv := newReceiver(t, always(200))
	var mu sync.Mutex
	first := true
	limited := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		f := first
		first = false
		mu.Unlock()
		if f {
			rw.Header().Set("Retry-After", "2")
			rw.WriteHeader(http.StatusTooManyRequests)
			return
		}
		rcv.Config.Handler.ServeHTTP(rw, r)
	}))
	defer limited.Close()
	id, _ := w.endpoint(t, map[string]any{"url": limited.URL})
	asked := time.Now()
	did := w.test(t, id)
	d := w.waitDelivery(t, id, did, "delivered")
	got := rcv.requests()
	if d["attempts"] != 2.0 || len(got) != 1 {
		t.Fatalf("delivery %v after %d accepted requests", d, len(got))
	}
	if wait := got[0].at.Sub(asked); wait < 2*time.Second {
		t.Fatalf("the retry came %v after the test event, before the receiver's Retry-After", wait)
	}
}

// A backlog behind a receiver slower than the in-process wait for a place
// goes back to the queue and comes out whole: each delivery arrives once,
// on its first attempt (waiting for a place is no failure), and the
// endpoint never has more than its share (one here) at once.
func TestBacklogBehindASlowReceiverArrivesOnceEach(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) { c.WebhookAccountConcurrency = 2 })
	var mu sync.Mutex
	inFlight, most := 0, 0
	got := map[string]int{}
	slow := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get(webhook.HeaderDeliveryID)]++
		if inFlight++; inFlight > most {
			most = inFlight
		}
		mu.Unlock()
		time.Sleep(400 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		rw.WriteHeader(204)
	}))
	defer slow.Close()
	id, _ := w.endpoint(t, map[string]any{"url": slow.URL})
	var ids []string
	for range 8 {
		ids = append(ids, w.test(t, id))
	}
	for _, did := range ids {
		if d := w.waitDelivery(t, id, did, "delivered"); d["attempts"] != 1.0 {
			t.Fatalf("delivery %v", d)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, did := range ids {
		if got[did] != 1 {
			t.Fatalf("delivery %s arrived %d times: %v", did, got[did], got)
		}
	}
	if most != 1 {
		t.Fatalf("the endpoint had %d attempts at once, its share is 1", most)
	}
}

// A receiver that refuses leaves retries due in the queue. When the workers
// have more due than they can make at once (one at a time here), another
// account's fresh event goes first: the broken receiver's retries wait, not
// everyone's webhooks.
func TestRetriesOfARefusingReceiverWaitBehindFreshEvents(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) {
		c.WebhookConcurrency = 1
		c.WebhookRetries = "50ms,1h"
	})
	blocked, release := make(chan struct{}), make(chan struct{})
	var unblock sync.Once
	var mu sync.Mutex
	var refused []time.Time
	refusing := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refused = append(refused, time.Now())
		n := len(refused)
		mu.Unlock()
		if n == 4 { // the first retry holds the only worker
			close(blocked)
			<-release
		}
		rw.WriteHeader(http.StatusInternalServerError)
	}))
	defer refusing.Close()
	defer unblock.Do(func() { close(release) }) // before Close, which waits for the handler
	refusingID, _ := w.endpoint(t, map[string]any{"url": refusing.URL})
	// Made before the worker is held, which lasts until the receiver
	// time-out (10 s) at most.
	otherKey, fastID, fast := w.otherAccountsEndpoint(t)
	for range 3 {
		w.test(t, refusingID)
	}
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the refusing receiver got no retry")
	}
	// Queued while the worker is busy: two retries are due, then another
	// account's event.
	if r := w.Do("POST", "/v1/webhooks/"+fastID+"/test", otherKey, nil); r.Status != 202 {
		t.Fatalf("test: %d %s", r.Status, r.Body)
	}
	queued := func(endpoint string) int {
		var n int
		if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'webhook_attempt'
			AND args->>'endpoint_id' = $1 AND state = 'available'`, endpoint).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The held attempt gives up at the receiver time-out, and the worker
	// then takes what is queued: this is the time there is to see it.
	for deadline := time.Now().Add(9 * time.Second); queued(refusingID) < 2 || queued(fastID) < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts of the refusing endpoint and %d of the other queued", queued(refusingID), queued(fastID))
		}
		time.Sleep(10 * time.Millisecond)
	}
	unblock.Do(func() { close(release) })
	got := fast.waitFor(t, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(refused) > 4 && refused[4].Before(got[0].at) {
		t.Fatalf("%d requests to the refusing receiver came first, the next at %v, the other account's at %v",
			len(refused)-4, refused[4].Format(time.StampMicro), got[0].at.Format(time.StampMicro))
	}
}
