package app_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/provider/smtp/smtptest"
)

// BenchmarkSendsTo50msProvider sends b.N emails from 32 clients through
// the API to an SMTP relay that takes 50 ms per message, with the default
// provider concurrency, and reports the emails a second that reached the
// relay, timed from the first send to the last message.
func BenchmarkSendsTo50msProvider(b *testing.B) {
	relay := smtptest.Start(b)
	relay.Delay(50 * time.Millisecond)
	s := apptest.Start(b, func(c *config.Config) {
		c.Provider, c.SMTPURL = "smtp", "smtp://"+relay.Addr
		c.ProviderConcurrency = 128
		c.AccountConcurrency = 0 // one account sends everything
	})
	_, _, key := s.Sender("acme.test")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ResetTimer()
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				body := fmt.Sprintf(`{"from":"app@acme.test","to":"user%d@example.org","subject":"bench","text":"hello"}`, i)
				req, _ := http.NewRequest("POST", s.URL+"/v1/emails/send", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != 202 {
					b.Errorf("send: %d", resp.StatusCode)
				}
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	accepted := time.Since(start)
	deadline := time.Now().Add(5 * time.Minute)
	for len(relay.Messages()) < b.N {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d messages reached the relay", len(relay.Messages()), b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/accepted.Seconds(), "accepted/s")
	b.ReportMetric(float64(b.N)/took.Seconds(), "emails/s")
}

// BenchmarkPipelineTo50msProvider queues b.N emails with no worker running,
// then starts worker processes and reports the emails a second they hand to
// a relay taking 50 ms per message, timed from the workers' start to the
// last message: the pipeline alone, not the API. "default" is one worker
// with the default provider concurrency; "1x16" and "2x16" compare one and
// two workers limited to 16 messages in flight each.
func BenchmarkPipelineTo50msProvider(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchPipeline(b, 1, 128) })
	b.Run("1x16", func(b *testing.B) { benchPipeline(b, 1, 16) })
	b.Run("2x16", func(b *testing.B) { benchPipeline(b, 2, 16) })
}

func benchPipeline(b *testing.B, workers, concurrency int) {
	relay := smtptest.Start(b)
	relay.Delay(50 * time.Millisecond)
	api := apptest.Start(b, func(c *config.Config) {
		c.Provider, c.SMTPURL = "smtp", "smtp://"+relay.Addr
		c.Roles = []string{"api", "projections"}
	})
	_, _, key := api.Sender("acme.test")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				body := fmt.Sprintf(`{"from":"app@acme.test","to":"user%d@example.org","subject":"bench","text":"hello"}`, i)
				req, _ := http.NewRequest("POST", api.URL+"/v1/emails/send", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					continue
				}
				resp.Body.Close()
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()

	b.ResetTimer()
	start := time.Now()
	cfg := api.Config
	cfg.Roles = []string{"workers"}
	cfg.ProviderConcurrency = concurrency
	cfg.AccountConcurrency = 0 // one account sends everything
	if n := os.Getenv("MAILROOM_BENCH_POOL"); n != "" {
		cfg.DatabaseURL += "&pool_max_conns=" + n
	}
	for range workers {
		apptest.StartWith(b, cfg)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for len(relay.Messages()) < b.N {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d messages reached the relay", len(relay.Messages()), b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "emails/s")
}
