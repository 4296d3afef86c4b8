package httpserver

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// inflightRetry is the Retry-After of a request refused for lack of room.
const inflightRetry = time.Second

// InflightBytes admits a request only while the bodies of the requests being
// served add up to at most max bytes, counting each by its Content-Length,
// or as bodyMax when the length is not declared (chunked). Beyond it the
// request gets a 503 "server_busy" with Retry-After before its body is read,
// so many large requests at once cannot exhaust memory. Requests without a
// body always pass. max <= 0 disables the cap.
func InflightBytes(max, bodyMax int64) echo.MiddlewareFunc {
	return bytesBudget(max, bodyMax, func(echo.Context) string { return "" }, func() *Problem {
		return NewProblem(http.StatusServiceUnavailable, "server_busy",
			"the server is receiving too much data at once; retry shortly")
	})
}

// InflightBytesPer is InflightBytes for each key (an account) on its own:
// the bodies one key's requests are sending may add up to at most max
// bytes, so one account's slow uploads cannot take the whole process's
// room from the others. Beyond it the request gets a 429 "rate_limited"
// with Retry-After: that account is over its share, not the server full.
func InflightBytesPer(max, bodyMax int64, key func(echo.Context) string) echo.MiddlewareFunc {
	return bytesBudget(max, bodyMax, key, func() *Problem {
		return NewProblem(http.StatusTooManyRequests, "rate_limited", fmt.Sprintf(
			"this account's requests are already sending %d MiB of data at once; retry when they are done", max>>20))
	})
}

// bytesBudget admits a request while the declared bodies of the requests
// of its key being served fit in max; refused builds the answer otherwise.
func bytesBudget(max, bodyMax int64, key func(echo.Context) string, refused func() *Problem) echo.MiddlewareFunc {
	// Shared by every request: echo wraps the handler anew for each one.
	var (
		mu   sync.Mutex
		used = map[string]int64{}
	)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if max <= 0 {
			return next
		}
		return func(c echo.Context) error {
			req := c.Request()
			size := req.ContentLength
			if size < 0 {
				size = bodyMax
			}
			if size == 0 || req.Body == nil || req.Body == http.NoBody {
				return next(c)
			}
			k := key(c)
			mu.Lock()
			ok := used[k]+size <= max
			if ok {
				used[k] += size
			}
			mu.Unlock()
			if !ok {
				// Counts of requests would describe limits that did not
				// refuse this one: the answer carries Retry-After alone.
				h := c.Response().Header()
				for _, name := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
					h.Del(name)
				}
				p := refused()
				p.RetryAfter = inflightRetry
				return p
			}
			defer func() {
				mu.Lock()
				if used[k] -= size; used[k] <= 0 {
					delete(used, k)
				}
				mu.Unlock()
			}()
			return next(c)
		}
	}
}
