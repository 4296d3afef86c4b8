package httpserver

import (
	"fmt"
	"math"
	"net/netip"
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
	scope     string // what a key is, named in refusals
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

// NewRateLimiter allows perSecond requests per key with bursts of burst;
// scope names what a key is ("credential", "account", "IP address") in the
// detail of a refusal. perSecond <= 0 disables limiting.
func NewRateLimiter(scope string, perSecond float64, burst int) *RateLimiter {
	if burst < 1 {
		burst = 1
	}
	rl := &RateLimiter{
		scope:     scope,
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
// a refused request gets a 429 problem with Retry-After whose detail names
// the scope. When several limiters pass a request, the headers describe the
// one with the fewest requests remaining; a refusal's describe the limiter
// that refused.
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
			if prev, err := strconv.Atoi(h.Get("RateLimit-Remaining")); !d.allowed || err != nil || d.remaining < prev {
				h.Set("RateLimit-Limit", strconv.Itoa(rl.burst))
				h.Set("RateLimit-Remaining", strconv.Itoa(d.remaining))
				h.Set("RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(d.reset.Seconds())), 10))
			}
			if !d.allowed {
				p := TooManyRequests(d.retryAfter)
				p.Detail = fmt.Sprintf("rate limit per %s exceeded; retry after %s", rl.scope, seconds(retryAfterSeconds(d.retryAfter)))
				return p
			}
			return next(c)
		}
	}
}

// IPKey keys a limiter by the client's address as the server's IP
// extractor gives it (see Options.TrustedProxies). IPv6 clients are keyed
// by their /64, the block one host usually holds.
func IPKey(c echo.Context) string {
	a, err := netip.ParseAddr(c.RealIP())
	if err != nil {
		return c.RealIP()
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64) // cannot fail for a 128-bit address
		return p.String()
	}
	return a.String()
}

// size reports the number of tracked keys (for tests).
func (rl *RateLimiter) size() int {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return len(rl.buckets)
}
