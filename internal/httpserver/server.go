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
	// NoMetricsRoute measures requests but leaves /metrics to another
	// listener (the operator one).
	NoMetricsRoute bool
}

// New returns an echo instance with the problem ErrorHandler and the shared
// middleware, outermost first: recover, request id, metrics, request log,
// recover again (so handler panics are measured and logged as 500s), body
// limit. With opts.Metrics it also serves GET /metrics, unless
// opts.NoMetricsRoute.
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
	e.Use(RequestLogger(logger), Recover(), BodyLimit(MaxBodyBytes))

	if opts.Metrics != nil && !opts.NoMetricsRoute {
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

// ReadyFunc checks readiness: a nil error is ready. notes, when not empty,
// are added to the 200 body for operators (e.g. what is degraded).
type ReadyFunc func(ctx context.Context) (notes map[string]any, err error)

// Health registers GET /healthz (liveness: always 200) and GET /readyz (200
// when ready, else a 503 problem "not_ready"). With detail, /readyz says why
// it is not ready (the error text, which readiness checks keep free of
// secrets) and adds the notes to a 200; without (a public listener beside an
// operator one), it says only ready or not ready. A nil ready is always
// ready.
func Health(e *echo.Echo, ready ReadyFunc, detail bool) {
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", func(c echo.Context) error {
		body := map[string]any{"status": "ready"}
		if ready != nil {
			ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
			defer cancel()
			notes, err := ready(ctx)
			if err != nil {
				if !detail {
					return NewProblem(http.StatusServiceUnavailable, "not_ready", "the service is not ready")
				}
				return NewProblem(http.StatusServiceUnavailable, "not_ready", err.Error())
			}
			if detail {
				for k, v := range notes {
					if k != "status" {
						body[k] = v
					}
				}
			}
		}
		return c.JSON(http.StatusOK, body)
	})
}
