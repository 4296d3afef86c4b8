package httpserver

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// RateLimiter is a token bucket per key (e.g. per API key or account).
// Keys idle long enough for their bucket to refill are evicted, so memory is
// bounded by the keys active within that window.
type RateLimiter struct {
	perSecond float64
	burst     int
	idleTTL   time.Duration // after this long unused, a bucket is full again
	sweepEach time.Duration

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time

	now func() time.Time // replaced in tests
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// NewRateLimiter allows perSecond requests per key with bursts of burst.
// perSecond <= 0 disables limiting.
func NewRateLimiter(perSecond float64, burst int) *RateLimiter {
	if burst < 1 {
		burst = 1
	}
	rl := &RateLimiter{
		perSecond: perSecond,
		burst:     burst,
		buckets:   make(map[string]*bucket),
		now:       time.Now,
	}
	if perSecond > 0 {
		// Cap so absurdly low rates cannot overflow a Duration.
		refill := math.Min(float64(burst)/perSecond, (24 * time.Hour).Seconds())
		rl.idleTTL = time.Duration(math.Ceil(refill)) * time.Second
		rl.sweepEach = min(rl.idleTTL, time.Minute)
	}
	return rl
}

func (rl *RateLimiter) enabled() bool { return rl != nil && rl.perSecond > 0 }

// decision is the outcome of one take.
type decision struct {
	allowed    bool
	remaining  int
	reset      time.Duration // until the bucket is full (allowed) or holds a token (refused)
	retryAfter time.Duration
}

func (rl *RateLimiter) take(key string) decision {
	now := rl.now()
	rl.mu.Lock()
	defer rl.mu.Unlock()

	if now.Sub(rl.lastSweep) >= rl.sweepEach {
		for k, b := range rl.buckets {
			if now.Sub(b.seen) >= rl.idleTTL {
				delete(rl.buckets, k)
			}
		}
		rl.lastSweep = now
	}
	b := rl.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(rate.Limit(rl.perSecond), rl.burst)}
		rl.buckets[key] = b
	}
	b.seen = now

	allowed := b.lim.AllowN(now, 1)
	tokens := b.lim.TokensAt(now)
	d := decision{allowed: allowed, remaining: max(0, int(math.Floor(tokens)))}
	if allowed {
		d.reset = secondsDuration((float64(rl.burst) - tokens) / rl.perSecond)
	} else {
		d.retryAfter = secondsDuration((1 - tokens) / rl.perSecond)
		d.reset = d.retryAfter
	}
	return d
}

func secondsDuration(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// Middleware limits requests by key(c); an empty key is not limited. Limited
// responses carry RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset;
// a refused request gets a 429 problem with Retry-After.
func (rl *RateLimiter) Middleware(key func(echo.Context) string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if !rl.enabled() {
			return next
		}
		return func(c echo.Context) error {
			k := key(c)
			if k == "" {
				return next(c)
			}
			d := rl.take(k)
			h := c.Response().Header()
			h.Set("RateLimit-Limit", strconv.Itoa(rl.burst))
			h.Set("RateLimit-Remaining", strconv.Itoa(d.remaining))
			h.Set("RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(d.reset.Seconds())), 10))
			if !d.allowed {
				return TooManyRequests(d.retryAfter)
			}
			return next(c)
		}
	}
}

// size reports the number of tracked keys (for tests).
func (rl *RateLimiter) size() int {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return len(rl.buckets)
}
