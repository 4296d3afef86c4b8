package benchrun_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
)

// The refusing neighbour: one account sends 10 emails a second, and each
// email's email.sent and email.delivered events go to ten endpoints that
// refuse at once (500): 200 deliveries a second, each retried on a
// schedule shortened to fit the run (five retries 11 s apart, then one
// after 300 s: six attempts within 55 s, none exhausted, so no endpoint is
// disabled; each retry waits in the queue as a scheduled job, as the
// default schedule's do). That is more webhook work than two cores can do.
// Another account sends 10 emails a second to one endpoint that answers
// 204. For 90 s, the figure is the other account's send -> email.delivered
// webhook latency and its sends' p99, against the webhook-latency goal.
const (
	neighbourFor     = 90 * time.Second
	neighbourRefused = 10 // sends a second of the account whose receivers refuse
	neighbourOwn     = 10 // sends a second of the other
	neighbourHooks   = 10 // refusing endpoints
)

func BenchmarkRefusingNeighbour(b *testing.B) {
	once(b, func(b *testing.B) metrics {
		dns := dnstest.Start(b)
		c := newCluster(b, "neighbour", "MAILROOM_DNS_RESOLVERS="+dns.Addr(),
			"MAILROOM_WEBHOOK_RETRY_SCHEDULE=11s,11s,11s,11s,11s,300s")
		c.serve("all-roles")
		var refusals atomic.Int64
		refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			refusals.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
		}))
		b.Cleanup(refusing.Close)
		for i := range neighbourHooks {
			c.subscribe(fmt.Sprintf("%s/%d", refusing.URL, i), "email.sent", "email.delivered")
		}
		other := c.otherAccount(dns, "neighbour.test")
		r := newReceiver(b)
		body, _ := json.Marshal(map[string]any{"url": r.URL, "event_types": []string{"email.delivered"}})
		if _, err := c.doAs(newClient(), other, "POST", "/v1/webhooks", string(body), nil); err != nil {
			b.Fatal(err)
		}

		var (
			mu      sync.Mutex
			sentAt  = map[string]time.Time{}
			sendLat []time.Duration
			failed  int
			first   error
			wg      sync.WaitGroup
		)
		sender := func(key, from string, rate int, own bool) {
			defer wg.Done()
			client := newClient()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			var inner sync.WaitGroup
			for end, i := time.Now().Add(neighbourFor), 0; time.Now().Before(end); i++ {
				<-tick.C
				inner.Add(1)
				go func() {
					defer inner.Done()
					t0 := time.Now()
					body := fmt.Sprintf(`{"from":%q,"to":"user%d@example.org","subject":"bench %d","text":"hello"}`, from, i, i)
					var out struct{ ID string }
					_, err := c.doAs(client, key, "POST", "/v1/emails/send", body, &out)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed++
						if first == nil {
							first = err
						}
						return
					}
					if own {
						sentAt[out.ID] = t0
						sendLat = append(sendLat, time.Since(t0))
					}
				}()
			}
			inner.Wait()
		}
		start := time.Now()
		wg.Add(2)
		go sender(c.key, "bench@example.test", neighbourRefused, false)
		go sender(other, "bench@neighbour.test", neighbourOwn, true)
		wg.Wait()
		attempts := float64(refusals.Load()) / time.Since(start).Seconds()
		if failed > 0 {
			fmt.Printf("%s: %d sends refused or failed, the first: %v\n", c.name, failed, first)
		}
		n, _ := r.wait(len(sentAt), drainLimit)
		var lat []time.Duration
		for id, t0 := range sentAt {
			if t, ok := r.arrival(id, "email.delivered"); ok {
				lat = append(lat, t.Sub(t0))
			}
		}
		p50, p99, worst := percentile(lat, .50), percentile(lat, .99), percentile(lat, 1)
		sendP99 := percentile(sendLat, .99)
		note := ""
		if failed > 0 {
			note = fmt.Sprintf(" (%d sends failed)", failed)
		}
		if n < len(sentAt) {
			note += fmt.Sprintf(" (only %d of %d webhooks arrived)", n, len(sentAt))
		}
		figure("neighbour", "beside %d refused attempts/s of another account: send -> email.delivered webhook p50 %.1f ms, p99 %.1f ms, max %.0f ms; sends p99 %.1f ms%s (goal p50 <= 50 ms, p99 <= 200 ms) %s",
			int(attempts), ms(p50), ms(p99), ms(worst), ms(sendP99), note,
			verdict(failed == 0 && n == len(sentAt) && p50 <= 50*time.Millisecond && p99 <= 200*time.Millisecond))
		c.stop()
		return metrics{"p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(worst), "send_p99_ms": ms(sendP99),
			"refused_attempts/s": attempts, "peak_RSS_MB": peakMB(c.name)}
	})
}

// otherAccount creates a second account with `mailroom accounts create`,
// adds and verifies domain for it against dns, and returns an API key of it.
func (c *cluster) otherAccount(dns *dnstest.Server, domain string) string {
	b := c.b
	cmd := exec.Command(c.bin, "accounts", "create", "--name", "Neighbour", "--json")
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("accounts create: %v\n%s", err, out)
	}
	var acct struct{ Token string }
	if err := json.Unmarshal(out, &acct); err != nil {
		b.Fatalf("accounts create printed %s: %v", out, err)
	}
	client := newClient()
	var d struct {
		ID         string
		Status     string
		DNSRecords []struct {
			Type, Name, Value string
			Priority          int
		} `json:"dns_records"`
	}
	if _, err := c.doAs(client, acct.Token, "POST", "/api/domains", fmt.Sprintf(`{"domain":%q}`, domain), &d); err != nil {
		b.Fatal(err)
	}
	for _, r := range d.DNSRecords {
		dns.Add(dnscheck.Record{Type: r.Type, Name: r.Name, Value: r.Value, Priority: r.Priority})
	}
	if _, err := c.doAs(client, acct.Token, "POST", "/api/domains/"+d.ID+"/verify", "", &d); err != nil {
		b.Fatal(err)
	}
	if !strings.EqualFold(d.Status, "verified") {
		b.Fatalf("%s is %s after its records were published", domain, d.Status)
	}
	var key struct{ Key string }
	if _, err := c.doAs(client, acct.Token, "POST", "/api/auth/api-keys", `{"name":"bench"}`, &key); err != nil {
		b.Fatal(err)
	}
	return key.Key
}
