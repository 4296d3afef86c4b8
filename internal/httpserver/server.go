package httpserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/labstack/echo/v4"
)

// Options configures New.
type Options struct {
	Logger  *slog.Logger // nil: slog.Default()
	Metrics *Metrics     // nil: no metrics middleware and no /metrics
	// MaxInflightBytes caps the request bytes being served at once
	// (InflightBytes); 0: no cap.
	MaxInflightBytes int64
}

// New returns an echo instance with the problem ErrorHandler and the shared
// middleware, outermost first: recover, request id, metrics, request log,
// recover again (so handler panics are measured and logged as 500s), body
// limit, bytes in flight. With opts.Metrics it also serves GET /metrics.
func New(opts Options) *echo.Echo {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = ErrorHandler(logger)
	// Slow-header clients must not hold connections forever.
	e.Server.ReadHeaderTimeout = 10 * time.Second

	e.Use(Recover(), RequestID())
	if opts.Metrics != nil {
		e.Use(opts.Metrics.Middleware())
	}
	e.Use(RequestLogger(logger), Recover(), BodyLimit(MaxBodyBytes), InflightBytes(opts.MaxInflightBytes, MaxBodyBytes))

	if opts.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(opts.Metrics.Handler()))
	}
	return e
}

// PanicError is a recovered panic, returned as an error so it becomes a 500.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Recover turns a panic further down the chain into a *PanicError, which the
// ErrorHandler answers with a 500 problem (request id, no internals) and logs
// with its stack. http.ErrAbortHandler is re-panicked as net/http expects.
func Recover() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				if r := recover(); r != nil {
					if r == http.ErrAbortHandler {
						panic(r)
					}
					err = &PanicError{Value: r, Stack: debug.Stack()}
				}
			}()
			return next(c)
		}
	}
}

// readyTimeout bounds one readiness check.
const readyTimeout = 5 * time.Second

// Health registers GET /healthz (liveness: always 200) and GET /readyz
// (200 when ready returns nil, else a 503 problem "not_ready" whose detail is
// the error text, which readiness checks keep operator-safe). A nil ready is
// always ready.
func Health(e *echo.Echo, ready func(ctx context.Context) error) {
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", func(c echo.Context) error {
		if ready != nil {
			ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
			defer cancel()
			if err := ready(ctx); err != nil {
				return NewProblem(http.StatusServiceUnavailable, "not_ready", err.Error())
			}
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	})
}
