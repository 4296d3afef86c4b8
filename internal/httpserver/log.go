package httpserver

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// RequestLogger logs one structured line per request at info level. Probe
// and scrape traffic (/healthz, /metrics, a successful /readyz) is skipped.
func RequestLogger(logger *slog.Logger) echo.MiddlewareFunc {
	if logger == nil {
		logger = slog.Default()
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			if err := next(c); err != nil {
				// Write the error now so its status is what gets logged.
				c.Error(err)
			}
			req := c.Request()
			res := c.Response()
			switch req.URL.Path {
			case "/healthz", "/metrics":
				return nil
			case "/readyz":
				if res.Status == http.StatusOK {
					return nil
				}
			}
			attrs := []slog.Attr{
				slog.String("method", req.Method),
				slog.String("route", routeLabel(c)),
				slog.String("path", req.URL.Path),
				slog.Int("status", res.Status),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
				slog.Int64("bytes", res.Size),
			}
			logger.LogAttrs(context.Background(), slog.LevelInfo, "http request", append(attrs, RequestIDsOf(c).logAttrs()...)...)
			return nil
		}
	}
}
