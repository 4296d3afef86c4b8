package httpserver

import (
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
	// Shared by every request: echo wraps the handler anew for each one.
	var (
		mu   sync.Mutex
		used int64
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
			mu.Lock()
			ok := used+size <= max
			if ok {
				used += size
			}
			mu.Unlock()
			if !ok {
				p := NewProblem(http.StatusServiceUnavailable, "server_busy",
					"the server is receiving too much data at once; retry shortly")
				p.RetryAfter = inflightRetry
				return p
			}
			defer func() {
				mu.Lock()
				used -= size
				mu.Unlock()
			}()
			return next(c)
		}
	}
}
