package benchrun_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"encoding/hex"
	"path/filepath"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/eventstore/sealed"
	"github.com/mailroom/mailroom/internal/secretbox"
)

// metrics are a figure's results by unit, for b.ReportMetric.
type metrics map[string]float64

var ran = map[string]metrics{}

// once runs a figure a single time whatever b.N: Go calls a benchmark again
// with a larger b.N when a run was shorter than -benchtime, and a second
// 10 s burst would only repeat the first. Later calls report the same
// metrics.
func once(b *testing.B, run func(b *testing.B) metrics) {
	figuresMu.Lock()
	m, ok := ran[b.Name()]
	figuresMu.Unlock()
	if !ok {
		m = run(b)
		figuresMu.Lock()
		ran[b.Name()] = m
		figuresMu.Unlock()
	}
	for unit, v := range m {
		b.ReportMetric(v, unit)
	}
}

// refused notes the sends of a burst that were not accepted, which make
// its figure suspect (the first error is printed above it).
func refused(bu burst) string {
	if bu.failed == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d sends failed)", bu.failed)
}

// perSecond is n over took; nothing arrived is a rate of 0.
func perSecond(n int, took time.Duration) float64 {
	if n == 0 || took <= 0 {
		return 0
	}
	return float64(n) / took.Seconds()
}

// drained describes how a wait for n of want ended, over took.
func drained(n, want int, took time.Duration, unit string) string {
	rate := perSecond(n, took)
	if n < want {
		return fmt.Sprintf("did not finish: %d of %d in %.0f s after the burst (%.0f %s until then)", n, want, drainLimit.Seconds(), rate, unit)
	}
	return fmt.Sprintf("%.0f %s", rate, unit)
}

// BenchmarkProviderAt50ms: emails reaching a provider that takes 50 ms per
// message, from a 10 s burst of 32 clients, timed from the first send to
// the last message the provider accepted. One process, default settings.
func BenchmarkProviderAt50ms(b *testing.B) {
	once(b, func(b *testing.B) metrics {
		c := newCluster(b, "provider-50ms", "MAILROOM_SANDBOX_LATENCY=50ms")
		c.serve("all-roles")
		bu := c.burst(burstFor)
		n, last := c.drainOutbox(len(bu.accepted), drainLimit)
		took := last.Sub(bu.start)
		rate := perSecond(n, took)
		figure("provider-50ms", "%s reach the provider (%d sent in %.1f s%s) (goal >= 1000/s) %s",
			drained(n, len(bu.accepted), took, "emails/s"), len(bu.accepted), bu.took.Seconds(), refused(bu),
			verdict(bu.failed == 0 && n == len(bu.accepted) && rate >= 1000))
		c.stop()
		return metrics{"emails/s": rate, "peak_RSS_MB": peakMB(c.name)}
	})
}

// BenchmarkAllTheWayThrough: with the instant sandbox and one endpoint for
// email.sent and email.delivered, emails and webhooks per second from a
// 10 s burst of 32 clients, timed from the first send to the last webhook
// the local receiver got.
func BenchmarkAllTheWayThrough(b *testing.B) {
	once(b, func(b *testing.B) metrics {
		c := newCluster(b, "through")
		c.serve("all-roles")
		r := newReceiver(b)
		c.subscribe(r.URL, "email.sent", "email.delivered")
		bu := c.burst(burstFor)
		want := 2 * len(bu.accepted)
		n, last := r.wait(want, drainLimit)
		took := last.Sub(bu.start)
		through := 0
		for _, id := range bu.accepted {
			_, sent := r.arrival(id, "email.sent")
			_, delivered := r.arrival(id, "email.delivered")
			if sent && delivered {
				through++
			}
		}
		emails, hooks := perSecond(through, took), perSecond(n, took)
		figure("through", "%s, %s (%d sent in %.1f s%s) (goal >= 1000 emails/s, >= 2000 webhooks/s) %s",
			drained(through, len(bu.accepted), took, "emails/s all the way through"),
			drained(n, want, took, "webhooks/s"), len(bu.accepted), bu.took.Seconds(), refused(bu),
			verdict(bu.failed == 0 && n == want && emails >= 1000 && hooks >= 2000))
		c.stop()
		return metrics{"emails/s": emails, "webhooks/s": hooks, "peak_RSS_MB": peakMB(c.name)}
	})
}

// BenchmarkAccepted: sends the API accepts per second, and their p99
// latency, from 32 clients over 10 s, workers running in the same process.
func BenchmarkAccepted(b *testing.B) {
	once(b, func(b *testing.B) metrics {
		c := newCluster(b, "accepted")
		c.serve("all-roles")
		bu := c.burst(burstFor)
		rate := float64(len(bu.accepted)) / bu.took.Seconds()
		p50, p99 := percentile(bu.latency, .50), percentile(bu.latency, .99)
		figure("accepted", "%.0f sends/s accepted, p50 %.1f ms, p99 %.1f ms%s (goal >= 1500/s, p99 <= 50 ms) %s",
			rate, ms(p50), ms(p99), refused(bu), verdict(bu.failed == 0 && rate >= 1500 && p99 <= 50*time.Millisecond))
		c.stop()
		return metrics{"sends/s": rate, "p50_ms": ms(p50), "p99_ms": ms(p99), "peak_RSS_MB": peakMB(c.name)}
	})
}

// BenchmarkDeliveredWebhookLatency: at a steady 100 sends/s for 10 s, the
// time from the start of each send to its email.delivered webhook.
func BenchmarkDeliveredWebhookLatency(b *testing.B) {
	once(b, func(b *testing.B) metrics {
		c := newCluster(b, "webhook-latency")
		c.serve("all-roles")
		r := newReceiver(b)
		c.subscribe(r.URL, "email.delivered")
		const rate, sends = 100, 1000
		client := newClient()
		var (
			mu       sync.Mutex
			sentAt   = map[string]time.Time{}
			wg       sync.WaitGroup
			failed   int
			firstErr error
		)
		tick := time.NewTicker(time.Second / rate)
		for i := range sends {
			<-tick.C
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				id, err := c.send(client, i)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				sentAt[id] = t0
			}()
		}
		tick.Stop()
		wg.Wait()
		if len(sentAt) == 0 {
			b.Fatalf("no send accepted: %v", firstErr)
		}
		note := ""
		if failed > 0 {
			note = fmt.Sprintf(" (%d sends failed)", failed)
			fmt.Printf("%s: %d sends refused or failed, the first: %v\n", c.name, failed, firstErr)
			fmt.Printf("%s: the end of %s's log:\n%s\n", c.name, c.procs[0].name, tail(c.procs[0].log))
		}
		n, _ := r.wait(len(sentAt), drainLimit)
		var lat []time.Duration
		for id, t0 := range sentAt {
			if t, ok := r.arrival(id, "email.delivered"); ok {
				lat = append(lat, t.Sub(t0))
			}
		}
		p50, p99 := percentile(lat, .50), percentile(lat, .99)
		if n < len(sentAt) {
			figure("webhook-latency", "did not finish: %d of %d email.delivered webhooks in %.0f s after the last send (p50 %.0f ms, p99 %.0f ms of those)%s (goal p50 <= 50 ms, p99 <= 200 ms) %s",
				n, len(sentAt), drainLimit.Seconds(), ms(p50), ms(p99), note, verdict(false))
		} else {
			figure("webhook-latency", "send -> email.delivered webhook p50 %.1f ms, p99 %.1f ms at %d sends/s%s (goal p50 <= 50 ms, p99 <= 200 ms) %s",
				ms(p50), ms(p99), rate, note, verdict(failed == 0 && p50 <= 50*time.Millisecond && p99 <= 200*time.Millisecond))
		}
		c.stop()
		return metrics{"p50_ms": ms(p50), "p99_ms": ms(p99), "peak_RSS_MB": peakMB(c.name)}
	})
}

// BenchmarkTwoWorkers: emails reaching a 50 ms provider with two worker
// processes (16 messages in flight each) beside one API and projections
// process, against the same with one worker, from the same kind of burst.
func BenchmarkTwoWorkers(b *testing.B) {
	once(b, func(b *testing.B) metrics {
		one, oneDone, oneFailed := workersRate(b, 1)
		two, twoDone, twoFailed := workersRate(b, 2)
		ratio := 0.0
		if one > 0 {
			ratio = two / one
		}
		note := ""
		if !oneDone || !twoDone {
			note = fmt.Sprintf(" (a run did not finish in %.0f s after its burst: rates until then)", drainLimit.Seconds())
		}
		if oneFailed+twoFailed > 0 {
			note += fmt.Sprintf(" (%d and %d sends failed)", oneFailed, twoFailed)
		}
		figure("two-workers", "2 workers %.0f emails/s vs 1 worker %.0f emails/s = %.2fx%s (goal >= 1.7x) %s",
			two, one, ratio, note, verdict(oneFailed+twoFailed == 0 && oneDone && twoDone && ratio >= 1.7))
		return metrics{"one_worker_emails/s": one, "two_workers_emails/s": two, "ratio": ratio,
			"peak_RSS_MB": max(peakMB("workers-1"), peakMB("workers-2"))}
	})
}

// workersRate runs a burst against an API and projections process with
// workers separate worker processes, and returns the rate at which emails
// reached the provider, whether all of them did, and how many sends failed.
func workersRate(b *testing.B, workers int) (float64, bool, int) {
	c := newCluster(b, fmt.Sprintf("workers-%d", workers),
		"MAILROOM_SANDBOX_LATENCY=50ms", "MAILROOM_PROVIDER_CONCURRENCY=16")
	// Smaller pools than the default 24 keep three processes well within
	// PostgreSQL's default 100 connections, beside whatever else uses it.
	c.serve("api-projections", "MAILROOM_ROLES=api,projections", c.pooled(16))
	for i := range workers {
		c.serve(fmt.Sprintf("worker-%d", i+1), "MAILROOM_ROLES=workers", c.pooled(10))
	}
	bu := c.burst(burstFor)
	n, last := c.drainOutbox(len(bu.accepted), drainLimit)
	took := last.Sub(bu.start)
	fmt.Printf("%s: %s (%d sent in %.1f s)\n", c.name, drained(n, len(bu.accepted), took, "emails/s reach the provider"), len(bu.accepted), bu.took.Seconds())
	c.stop()
	return perSecond(n, took), n == len(bu.accepted), bu.failed
}

// BenchmarkRebuildEmails: `mailroom projections rebuild emails` over 80,000
// events (16,000 emails, each queued, sent, delivered, opened and
// clicked, recorded as the service records them: personal fields sealed
// with each email's data key, recipients with their keys), in events/s. The command's wall time less its start (opening
// the application, timed by `mailroom projections status`).
func BenchmarkRebuildEmails(b *testing.B) {
	once(b, func(b *testing.B) metrics {
		const emails, perEmail = 16_000, 5
		c := newCluster(b, "rebuild")
		// Set the projections up on the empty log, so that opening the
		// application later does not build them all from the filled one.
		c.tool(false, "projections", "status")
		fillEmails(b, c, emails)
		c.tool(false, "projections", "status") // warm the database's caches
		took := c.tool(true, "projections", "rebuild", "emails")
		start := min(c.tool(false, "projections", "status"), c.tool(false, "projections", "status"))
		events := emails * perEmail
		rate := float64(events) / (took - start).Seconds()
		figure("rebuild-emails", "%.0f events/s over %d events (command %.2f s less %.2f s to start) (goal >= 100000/s) %s",
			rate, events, took.Seconds(), start.Seconds(), verdict(rate >= 100_000))
		return metrics{"events/s": rate, "peak_RSS_MB": peakMB(c.name)}
	})
}

// tool runs one operator command with the cluster's settings and returns
// its wall time; a measured one's peak memory counts among the figures.
func (c *cluster) tool(measured bool, args ...string) time.Duration {
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		c.b.Fatalf("mailroom %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if measured {
		recordPeak(c.name+"/"+strings.Join(args, "-"), cmd.ProcessState)
	}
	return took
}

// fillEmails appends emails' histories through the sealed event store,
// with the cluster's master key, 200 streams per transaction.
func fillEmails(b *testing.B, c *cluster, emails int) {
	ctx := context.Background()
	pool, err := database.Open(ctx, c.db)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	hexKey, err := os.ReadFile(filepath.Join(c.dir, "master.key"))
	if err != nil {
		b.Fatal(err)
	}
	master, err := hex.DecodeString(strings.TrimSpace(string(hexKey)))
	if err != nil {
		b.Fatal(err)
	}
	box, err := secretbox.New(master)
	if err != nil {
		b.Fatal(err)
	}
	addressKeys, err := datakeys.NewAddressKeys(master)
	if err != nil {
		b.Fatal(err)
	}
	store := sealed.New(postgres.New(pool), datakeys.New(pool, box))
	now := time.Now()
	to := []string{"x@example.org"}
	keys := addressKeys.OfRecipients("bench", to)
	var batch []eventstore.StreamAppend
	for i := range emails {
		id := uuid.Must(uuid.NewV7()).String() // as the service makes them
		evs := []domain.Event{
			&email.Queued{EmailID: id, AccountID: "bench", From: "a@acme.test", FromEmail: "a@acme.test", To: to, RecipientKeys: keys, Subject: "bench", QueuedAt: now},
			&email.Sent{EmailID: id, ProviderMessageID: "p-" + id, SentAt: now.Add(time.Second)},
			&email.Delivered{EmailID: id, FeedbackID: "d-" + id, Recipients: to, OccurredAt: now.Add(2 * time.Second)},
			&email.Opened{EmailID: id, FeedbackID: "o-" + id, UserAgent: "bench/1.0", OccurredAt: now.Add(3 * time.Second)},
			&email.Clicked{EmailID: id, FeedbackID: "c-" + id, Link: "https://acme.test/", OccurredAt: now.Add(4 * time.Second)},
		}
		data, err := codec.EncodeAll(evs, eventstore.Metadata{Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, eventstore.StreamAppend{Stream: email.Stream(id), Expected: eventstore.NoStream, Events: data})
		if len(batch) == 200 || i == emails-1 {
			if _, err := store.AppendMany(ctx, batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}
