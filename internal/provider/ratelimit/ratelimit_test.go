package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/provider/ratelimit"
)

// Two processes' limiters on one bucket together never allow more than the
// bucket's first second's worth plus the rate times the time taken, and
// both get to send.
func TestLimitersShareTheRate(t *testing.T) {
	pool := pgtest.NewPool(t)
	const rate = 200.0
	limiters := []*ratelimit.Limiter{
		ratelimit.New(pool, "provider", rate),
		ratelimit.New(pool, "provider", rate),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var counts [2]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i, l := range limiters {
		for range 4 { // several senders per process
			wg.Go(func() {
				for l.Wait(ctx, 1) == nil {
					counts[i].Add(1)
				}
			})
		}
	}
	for counts[0].Load()+counts[1].Load() < 3*rate {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	total := float64(counts[0].Load() + counts[1].Load())
	if allowed := rate + rate*elapsed; total > allowed {
		t.Errorf("%v sends in %.2fs; the bucket allows at most %v", total, elapsed, allowed)
	}
	if counts[0].Load() == 0 || counts[1].Load() == 0 {
		t.Errorf("sends per process: %d and %d; want both", counts[0].Load(), counts[1].Load())
	}
}

// A sender whose time is up stops waiting for its turn even while another
// sender of the same process holds the limiter, waiting for the next token:
// otherwise a job past its time-out would stay blocked until that token
// came, long after the queue handed the job to another worker.
func TestAWaitEndsWithItsContextWhileAnotherSenderWaits(t *testing.T) {
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, "provider", 0.001)             // a token every 1000 s
	if err := l.Wait(context.Background(), 1); err != nil { // the bucket's one token
		t.Fatal(err)
	}
	drawn := func() time.Time {
		var at time.Time
		if err := pool.QueryRow(context.Background(), "SELECT updated_at FROM provider_rate_buckets WHERE name = 'provider'").Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	first := drawn()
	ctx, stop := context.WithCancel(context.Background())
	holder := make(chan error, 1)
	go func() { holder <- l.Wait(ctx, 1) }()
	t.Cleanup(func() { stop(); <-holder })
	// The other sender has found the bucket empty once it has drawn from
	// it; from then on it waits for the next token, holding the limiter.
	for deadline := time.Now().Add(10 * time.Second); drawn().Equal(first); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other sender never drew from the bucket")
		}
	}
	timedOut, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- l.Wait(timedOut, 1) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		stop() // lets the blocked Wait return before the pool closes
		t.Fatalf("a Wait whose context has ended is still waiting behind the other sender: %v", <-done)
	}
}

// A message takes a token for each of its recipients, as SES counts its
// rate, and one to more recipients than the bucket holds takes them at
// once, leaving the bucket owing the rest.
func TestAMessageTakesATokenPerRecipient(t *testing.T) {
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, "provider", 50) // a bucket of 50
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.Wait(ctx, 50); err != nil {
		t.Fatal(err)
	}
	// The bucket's tokens as of its last draw: refills are counted at the
	// next one, so this does not depend on how long the test took.
	var left float64
	if err := pool.QueryRow(ctx, "SELECT tokens FROM provider_rate_buckets WHERE name = 'provider'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left >= 1 {
		t.Fatalf("a message to 50 recipients left %.2f of the bucket's 50 tokens", left)
	}
	if err := l.Wait(ctx, 60); err != nil {
		t.Fatalf("a message to more recipients than the bucket holds: %v", err)
	}
}

// A message to more recipients than the bucket holds neither holds the
// process's turn while the bucket refills nor outlasts its context: it
// leaves the bucket owing, and the next message waits for the debt.
func TestALargeMessageOwesWhatTheBucketLacks(t *testing.T) {
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, "provider", 10) // a bucket of 10
	// Gathering the 30 missing tokens would take 3 s; owing them takes
	// one draw.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.Wait(ctx, 40); err != nil {
		t.Fatalf("40 recipients at 10 a second: %v", err)
	}
	start := time.Now()
	if err := l.Wait(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2500*time.Millisecond {
		t.Fatalf("the next message went %v after one to 40 recipients at 10 a second, want about 3 s", d)
	}
}
