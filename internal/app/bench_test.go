package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/eventstore"
)

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(float64(len(d)-1)*p)]
}

// sendAt200 sends b.N emails at 200 per second and records when each send
// started, by email id.
func sendAt200(b *testing.B, url, key string, mu sync.Locker, started map[string]time.Time) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := range b.N {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"from":"app@acme.test","to":"user%d@example.org","subject":"latency","text":"hello"}`, i)
			req, _ := http.NewRequest("POST", url+"/v1/emails/send", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			var out struct{ ID string }
			decodeJSON(resp, &out)
			mu.Lock()
			started[out.ID] = t0
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// arrivals waits until every started id has arrived and returns the
// latencies, or fails after a minute.
func arrivals(b *testing.B, mu sync.Locker, started map[string]time.Time, arrived func(id string) (time.Time, bool)) []time.Duration {
	deadline := time.Now().Add(120 * time.Second)
	for {
		var lat []time.Duration
		mu.Lock()
		for id, t0 := range started {
			if t1, ok := arrived(id); ok {
				lat = append(lat, t1.Sub(t0))
			}
		}
		mu.Unlock()
		if len(lat) == b.N {
			return lat
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d arrived", len(lat), b.N)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func benchSend(client *http.Client, url, key string, i int) (time.Duration, error) {
	body := fmt.Sprintf(`{"from":"app@acme.test","to":"user%d@example.org","subject":"bench %d","text":"hello"}`, i, i)
	req, _ := http.NewRequest("POST", url+"/v1/emails/send", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(start), nil
}

// BenchmarkSendAccepted measures accepted sends: requests/s with 32
// concurrent clients, and the latency of each accepted request.
func BenchmarkSendAccepted(b *testing.B) {
	s := apptest.Start(b, func(c *config.Config) {
		if os.Getenv("BENCH_NO_WORKERS") != "" {
			c.Roles = []string{"api", "projections"}
		}
	})
	_, _, key := s.Sender("acme.test")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var mu sync.Mutex
	var lat []time.Duration
	next := make(chan int)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				d, err := benchSend(client, s.URL, key, i)
				if err != nil {
					b.Error(err)
					continue
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
	b.ReportMetric(float64(percentile(lat, .5).Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(percentile(lat, .99).Microseconds())/1000, "p99_ms")
}

// BenchmarkSendToDelivered sends at 200 emails/s and measures the time from
// the send request to the EmailDelivered event in the log.
func BenchmarkSendToDelivered(b *testing.B) {
	s := apptest.Start(b)
	_, _, key := s.Sender("acme.test")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := s.Store.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	var mu sync.Mutex
	started := map[string]time.Time{}
	delivered := map[string]time.Time{}
	go func() {
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				return
			}
			if ev.Type != (&email.Delivered{}).EventType() {
				continue
			}
			e, _ := codec.Decode(ev)
			mu.Lock()
			delivered[e.(*email.Delivered).EmailID] = time.Now()
			mu.Unlock()
		}
	}()
	b.ResetTimer()
	sendAt200(b, s.URL, key, &mu, started)
	lat := arrivals(b, &mu, started, func(id string) (time.Time, bool) { t1, ok := delivered[id]; return t1, ok })
	b.ReportMetric(float64(percentile(lat, .5).Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(percentile(lat, .99).Microseconds())/1000, "p99_ms")
}

// hookSink counts webhook requests and remembers when each email's
// email.delivered arrived.
type hookSink struct {
	mu        sync.Mutex
	n         int
	delivered map[string]time.Time
}

func (h *hookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Type string
		Data struct {
			EmailID string `json:"email_id"`
		}
	}
	json.NewDecoder(r.Body).Decode(&ev)
	h.mu.Lock()
	h.n++
	if ev.Type == "email.delivered" {
		h.delivered[ev.Data.EmailID] = time.Now()
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookSink) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func hookBench(b *testing.B) (*apptest.Server, string, *hookSink) {
	s := apptest.Start(b, func(c *config.Config) { c.EgressAllowCIDRs = "127.0.0.0/8"; c.WebhookAllowHTTP = true })
	_, _, key := s.Sender("acme.test")
	sink := &hookSink{delivered: map[string]time.Time{}}
	srv := httptest.NewServer(sink)
	b.Cleanup(srv.Close)
	r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": srv.URL})
	if r.Status != 201 {
		b.Fatalf("endpoint: %d %s", r.Status, r.Body)
	}
	return s, key, sink
}

// BenchmarkWebhookDeliveries measures deliveries/s to a local receiver:
// b.N deliveries are created at once and the dispatcher drains them.
func BenchmarkWebhookDeliveries(b *testing.B) {
	s, _, sink := hookBench(b)
	var endpoint, account string
	s.Pool.QueryRow(context.Background(), "SELECT id, account_id FROM webhook_endpoints").Scan(&endpoint, &account)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += 8 {
				payload := fmt.Sprintf(`{"type":"email.delivered","created_at":"2026-11-22T10:00:00.000Z","data":{"email_id":"bench-%d"}}`, i)
				if _, err := s.Commands.CreateDelivery(ctx, delivery.Created{DeliveryID: uuid.NewString(), EndpointID: endpoint, AccountID: account,
					EmailID: fmt.Sprint("bench-", i), Type: "email.delivered", Payload: payload, CreatedAt: s.Clock.Now()}, commands.Meta{Actor: "bench"}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(120 * time.Second)
	for sink.count() < b.N {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d deliveries arrived", sink.count(), b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}

// BenchmarkEventToWebhook sends at 200 emails/s and measures the time from
// the send request to the email.delivered webhook reaching the receiver.
func BenchmarkEventToWebhook(b *testing.B) {
	s, key, sink := hookBench(b)
	var mu sync.Mutex
	started := map[string]time.Time{}
	b.ResetTimer()
	sendAt200(b, s.URL, key, &mu, started)
	lat := arrivals(b, &mu, started, func(id string) (time.Time, bool) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		t1, ok := sink.delivered[id]
		return t1, ok
	})
	b.ReportMetric(float64(percentile(lat, .5).Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(percentile(lat, .99).Microseconds())/1000, "p99_ms")
}

// BenchmarkPathAttachmentBudget sends emails with twenty 3 MiB path
// attachments, over the 40 MB budget, one after another until each has
// failed, and reports the peak resident memory of the whole process (API,
// pipeline and the file server) and the peak heap in use, sampled every
// millisecond. Downloads are read one at a time and stop at the budget,
// and the email fails before a message is built, so the peak does not grow
// with the attachments an email names.
func BenchmarkPathAttachmentBudget(b *testing.B) {
	s := apptest.Start(b, func(c *config.Config) {
		c.EgressAllowCIDRs = "127.0.0.0/8,::1/128"
		c.WebhookAllowHTTP = true
	})
	_, _, key := s.Sender("acme.test")
	srv, _ := attachmentServer(3 << 20)
	defer srv.Close()
	body := budgetBody(srv.URL)

	runtime.GC()
	debug.FreeOSMemory()
	baseline := procStatusKiB(b, "VmRSS")
	// Writing 5 to clear_refs resets VmHWM, the peak resident size.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatal(err)
	}
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peakHeap.Load() {
					peakHeap.Store(ms.HeapInuse)
				}
			}
		}
	}()
	b.ResetTimer()
	for range b.N {
		r := s.Do("POST", "/v1/emails/send", key, body)
		if r.Status != 202 {
			b.Fatalf("send: %d %s", r.Status, r.Body)
		}
		id := r.JSON(b)["id"].(string)
		for deadline := time.Now().Add(60 * time.Second); ; {
			if e := s.Do("GET", "/v1/emails/"+id, key, nil).JSON(b); e["status"] == "failed" {
				break
			} else if time.Now().After(deadline) {
				b.Fatalf("email %s never failed: %v", id, e)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	b.StopTimer()
	close(stop)
	<-sampled
	const mib = 1 << 20
	b.ReportMetric(float64(baseline)/1024, "baseline_RSS_MiB")
	b.ReportMetric(float64(procStatusKiB(b, "VmHWM"))/1024, "peak_RSS_MiB")
	b.ReportMetric(float64(peakHeap.Load())/mib, "peak_heap_MiB")
}

// procStatusKiB reads a kB field of /proc/self/status.
func procStatusKiB(b *testing.B, field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib)
			return kib
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// BenchmarkSlowEndpointBacklog queues 300 test events to an endpoint that
// answers after 9 s and reports what the backlog costs the database while
// it waits: commits/s (and the same before the events, idle_commits/s),
// attempt jobs run per second (webhook_jobs/s: River's fetch, the
// worker's run, the snooze), and the time a test event to another
// endpoint of the same account takes meanwhile, with the slow receiver's
// requests and the most it had at once (its share is 8). The figures are
// of one 10 s window per run; use -benchtime 1x.
func BenchmarkSlowEndpointBacklog(b *testing.B) {
	s := apptest.Start(b, func(c *config.Config) { c.EgressAllowCIDRs = "127.0.0.0/8"; c.WebhookAllowHTTP = true })
	_, _, key := s.Sender("acme.test")
	release := make(chan struct{})
	var arrived, inFlight, most atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-time.After(9 * time.Second):
		}
		inFlight.Add(-1)
		rw.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(slow.Close)
	b.Cleanup(func() { close(release) })
	sink := &hookSink{delivered: map[string]time.Time{}}
	fast := httptest.NewServer(sink)
	b.Cleanup(fast.Close)
	endpoint := func(url string) string {
		r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": url})
		if r.Status != 201 {
			b.Fatalf("endpoint: %d %s", r.Status, r.Body)
		}
		return r.JSON(b)["id"].(string)
	}
	slowID, fastID := endpoint(slow.URL), endpoint(fast.URL)
	ctx := context.Background()
	sample := func() (commits, runs int64) {
		if err := s.Pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&commits); err != nil {
			b.Fatal(err)
		}
		// A job's runs: its snoozes, and the run it is in or ended with.
		if err := s.Pool.QueryRow(ctx, `SELECT coalesce(sum(coalesce((metadata->>'snoozes')::int, 0) + attempt), 0)
			FROM river_job WHERE kind = 'webhook_attempt'`).Scan(&runs); err != nil {
			b.Fatal(err)
		}
		return commits, runs
	}
	const window = 10 * time.Second
	time.Sleep(2 * time.Second)
	c0, _ := sample()
	time.Sleep(window)
	c1, _ := sample()
	b.ResetTimer()
	for range b.N {
		for range 300 {
			if r := s.Do("POST", "/v1/webhooks/"+slowID+"/test", key, nil); r.Status != 202 {
				b.Fatalf("test: %d %s", r.Status, r.Body)
			}
		}
		time.Sleep(2 * time.Second) // the reader has queued them all
		c2, r2 := sample()
		time.Sleep(window)
		c3, r3 := sample()
		t0 := time.Now()
		if r := s.Do("POST", "/v1/webhooks/"+fastID+"/test", key, nil); r.Status != 202 {
			b.Fatalf("test: %d %s", r.Status, r.Body)
		}
		for deadline := time.Now().Add(30 * time.Second); sink.count() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("the other endpoint's test event never arrived")
			}
		}
		b.ReportMetric(float64(c1-c0)/window.Seconds(), "idle_commits/s")
		b.ReportMetric(float64(c3-c2)/window.Seconds(), "commits/s")
		b.ReportMetric(float64(r3-r2)/window.Seconds(), "webhook_jobs/s")
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "other_endpoint_ms")
		b.ReportMetric(float64(arrived.Load()), "slow_requests")
		b.ReportMetric(float64(most.Load()), "slow_most_at_once")
	}
}
