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

// One account whose ten endpoints never answer (until the test ends) holds
// its own share of attempts, not the process's: another account's webhook
// arrives while the slow ones are all pending. The receiver time-out is
// lengthened to a minute (an attempt's own bound), past the waits below,
// so no slow attempt ends and frees a place however slow the machine: the
// other account's webhook can only come through a place the slow account
// does not hold.
func TestSlowAccountDelaysNoOtherAccount(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) { c.WebhookTimeout = time.Minute })
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	arrived, ended := 0, 0
	slow := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done(): // Mailroom gave up
		}
		mu.Lock()
		ended++
		mu.Unlock()
		rw.WriteHeader(204)
	}))
	defer slow.Close()
	defer unblock() // before Close, which waits for the handlers
	for i := range 10 {
		w.endpoint(t, map[string]any{"url": slow.URL + "/" + string(rune('a'+i))})
	}
	otherKey, fastID, fast := w.otherAccountsEndpoint(t)

	// Each email's sent and delivered events go to all ten: more attempts
	// than the process runs at once.
	for range 7 {
		w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "s", "text": "t"})
	}
	deadline := time.Now().Add(30 * time.Second)
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
	e, n := ended, arrived
	mu.Unlock()
	if e != 0 {
		t.Fatalf("the other account's webhook came after %d slow attempts ended", e)
	}
	if n > 16 {
		t.Fatalf("the slow account has %d attempts in flight, more than its share", n)
	}
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
// everyone's webhooks. The receiver time-out is lengthened to a minute (an
// attempt's own bound), past the waits below, so each held attempt keeps
// the only worker until the test lets it go, however slow the machine.
func TestRetriesOfARefusingReceiverWaitBehindFreshEvents(t *testing.T) {
	w := newHookWorld(t, func(c *config.Config) {
		c.WebhookConcurrency = 1
		c.WebhookRetries = "50ms,1h"
		c.WebhookTimeout = time.Minute
	})
	first, go1 := make(chan struct{}), make(chan struct{})
	blocked, release := make(chan struct{}), make(chan struct{})
	var letFirstGo, unblock sync.Once
	var mu sync.Mutex
	var refused []time.Time
	refusing := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refused = append(refused, time.Now())
		n := len(refused)
		mu.Unlock()
		var hold <-chan struct{}
		switch n {
		case 1: // until the other two first attempts are queued
			close(first)
			hold = go1
		case 4: // the first retry, made after every first attempt
			close(blocked)
			hold = release
		}
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
		rw.WriteHeader(http.StatusInternalServerError)
	}))
	defer refusing.Close()
	defer unblock.Do(func() { close(release) }) // before Close, which waits for the handler
	defer letFirstGo.Do(func() { close(go1) })
	refusingID, _ := w.endpoint(t, map[string]any{"url": refusing.URL})
	otherKey, fastID, fast := w.otherAccountsEndpoint(t)
	queued := func(endpoint string) int {
		var n int
		if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'webhook_attempt'
			AND args->>'endpoint_id' = $1 AND state = 'available'`, endpoint).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitQueued := func(refusing, other int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); queued(refusingID) < refusing || queued(fastID) < other; {
			if time.Now().After(deadline) {
				t.Fatalf("%d attempts of the refusing endpoint and %d of the other queued", queued(refusingID), queued(fastID))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 3 {
		w.test(t, refusingID)
	}
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the refusing receiver got no request")
	}
	// The three first attempts are made one after the other, then the
	// retries, which are claimed after them.
	waitQueued(2, 0)
	letFirstGo.Do(func() { close(go1) })
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
	waitQueued(2, 1)
	unblock.Do(func() { close(release) })
	got := fast.waitFor(t, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(refused) > 4 && refused[4].Before(got[0].at) {
		t.Fatalf("%d requests to the refusing receiver came first, the next at %v, the other account's at %v",
			len(refused)-4, refused[4].Format(time.StampMicro), got[0].at.Format(time.StampMicro))
	}
}
