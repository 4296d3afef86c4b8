package httpserver

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/turns"
)

// inflightRetry is the Retry-After of a request refused for lack of room.
const inflightRetry = time.Second

// streamStep is how much room a body of undeclared length (chunked) takes
// at a time as it is read.
const streamStep = 1 << 20

// InflightBytes admits a request only while the bodies of the requests being
// served add up to at most max bytes. A body with a Content-Length takes its
// room before it is read; a body without one (chunked) takes room a MiB at a
// time as it arrives. Beyond the cap the request gets a 503 "server_busy"
// with Retry-After, so many large requests at once cannot exhaust memory.
// Requests without a body always pass. max <= 0 disables the cap.
func InflightBytes(max int64) echo.MiddlewareFunc {
	return bytesBudget(max, func(echo.Context) string { return "" }, func() *Problem {
		return NewProblem(http.StatusServiceUnavailable, "server_busy",
			"the server is receiving too much data at once; retry shortly")
	})
}

// InflightBytesPer is InflightBytes for each key (an account) on its own:
// the bodies one key's requests are sending may add up to at most max
// bytes, so one account's slow uploads cannot take the whole process's
// room from the others. Beyond it the request gets a 429 "rate_limited"
// with Retry-After: that account is over its share, not the server full.
func InflightBytesPer(max int64, key func(echo.Context) string) echo.MiddlewareFunc {
	return bytesBudget(max, key, func() *Problem {
		return NewProblem(http.StatusTooManyRequests, "rate_limited", fmt.Sprintf(
			"this account's requests are already sending %d MiB of data at once; retry when they are done", max>>20))
	})
}

// bytesBudget admits a request while the bodies of its key's requests
// being served fit in max; refused builds the answer otherwise.
func bytesBudget(max int64, key func(echo.Context) string, refused func() *Problem) echo.MiddlewareFunc {
	// Shared by every request: echo wraps the handler anew for each one.
	var (
		mu   sync.Mutex
		used = map[string]int64{}
	)
	take := func(k string, n int64) bool {
		mu.Lock()
		defer mu.Unlock()
		if used[k]+n > max {
			return false
		}
		used[k] += n
		return true
	}
	left := func(k string) int64 {
		mu.Lock()
		defer mu.Unlock()
		if n := max - used[k]; n > 0 {
			return n
		}
		return 0
	}
	give := func(k string, n int64) {
		mu.Lock()
		defer mu.Unlock()
		if used[k] -= n; used[k] <= 0 {
			delete(used, k)
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if max <= 0 {
			return next
		}
		return func(c echo.Context) error {
			req := c.Request()
			if req.ContentLength == 0 || req.Body == nil || req.Body == http.NoBody {
				return next(c)
			}
			k := key(c)
			refuse := func() *Problem {
				// Counts of requests would describe limits that did not
				// refuse this one. A 429 describes this one, in bytes,
				// as every 429 carries RateLimit-* headers; a 503 (the
				// server full, not a client over a limit) none.
				h := c.Response().Header()
				for _, name := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
					h.Del(name)
				}
				p := refused()
				p.RetryAfter = inflightRetry
				if p.Status == http.StatusTooManyRequests {
					h.Set("RateLimit-Limit", strconv.FormatInt(max, 10))
					h.Set("RateLimit-Remaining", strconv.FormatInt(left(k), 10))
					h.Set("RateLimit-Reset", strconv.Itoa(int(inflightRetry/time.Second)))
				}
				return p
			}
			if req.ContentLength < 0 {
				s := &steppedBody{ReadCloser: req.Body, take: func(n int64) bool { return take(k, n) }, refuse: refuse}
				req.Body = s
				defer func() { give(k, s.held) }()
				return next(c)
			}
			if !take(k, req.ContentLength) {
				return refuse()
			}
			defer give(k, req.ContentLength)
			return next(c)
		}
	}
}

// steppedBody is a body of undeclared length that takes room from its
// budget a step ahead of what it has read, and fails the read with the
// budget's refusal when no more room is left.
type steppedBody struct {
	io.ReadCloser
	take       func(n int64) bool
	refuse     func() *Problem
	held, read int64
	refusal    error
}

func (s *steppedBody) Read(p []byte) (int, error) {
	if s.refusal != nil {
		return 0, s.refusal
	}
	if s.read == s.held {
		if !s.take(streamStep) {
			s.refusal = s.refuse()
			return 0, s.refusal
		}
		s.held += streamStep
	}
	if room := s.held - s.read; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := s.ReadCloser.Read(p)
	s.read += int64(n)
	return n, err
}

// LargeInTurns serves each key's (an account's) large requests one at a
// time: those whose body, once read, is over min bytes. Decoding, checking
// and storing a body of tens of megabytes keeps a core busy for most of a
// second, and an account sending several at once would take every core
// from the others; in turns it takes one at most. The turn is taken when
// ReadJSON has read the body, so a slow upload holds nothing and uploads
// still run side by side; small requests never wait. A wait ends with the
// request's context.
func LargeInTurns(min int64, key func(echo.Context) string) echo.MiddlewareFunc {
	// One at a time per key, and any number of keys side by side.
	t := turns.New(math.MaxInt32)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			var release func()
			defer func() {
				if release != nil {
					release()
				}
			}()
			c.Set(turnKey, func(n int) error {
				if int64(n) <= min || release != nil {
					return nil
				}
				r, err := t.Take(c.Request().Context(), key(c))
				release = r
				return err
			})
			return next(c)
		}
	}
}

// turnKey holds, in a request's context, the function ReadJSON calls with
// the size of the body it read (LargeInTurns).
const turnKey = "mailroom.large-turn"

// takeTurn waits, when LargeInTurns serves c, for c's turn at a body of n
// bytes.
func takeTurn(c echo.Context, n int) error {
	if take, ok := c.Get(turnKey).(func(int) error); ok {
		return take(n)
	}
	return nil
}
