package ratelimit_test

import (
	"context"
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
				for l.Wait(ctx) == nil {
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
