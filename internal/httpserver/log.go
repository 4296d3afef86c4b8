package httpserver

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// RequestLogger logs one structured line per request at info level, with
// the client's address (as MAILROOM_TRUSTED_PROXIES lets it be told) and
// what AddLogAttrs added. Probe and scrape traffic (/healthz, /metrics, a
// successful /readyz) is skipped.
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
			attrs = append(attrs, slog.String("client_ip", c.RealIP()))
			attrs = append(attrs, RequestIDsOf(c).logAttrs()...)
			if more, ok := c.Get(logAttrsKey).([]slog.Attr); ok {
				attrs = append(attrs, more...)
			}
			logger.LogAttrs(context.Background(), slog.LevelInfo, "http request", attrs...)
			return nil
		}
	}
}

const logAttrsKey = "mailroom.log_attrs"

// AddLogAttrs adds attributes to the request's log line: who made it
// (authentication adds the account and credential) and what it made (a
// send adds the email's id), so the line leads to the rest of the story.
func AddLogAttrs(c echo.Context, attrs ...slog.Attr) {
	have, _ := c.Get(logAttrsKey).([]slog.Attr)
	c.Set(logAttrsKey, append(have, attrs...))
}
