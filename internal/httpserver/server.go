package httpserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/logs"
)

// Options configures New.
type Options struct {
	Logger  *slog.Logger // nil: slog.Default()
	Metrics *Metrics     // nil: no metrics middleware and no /metrics
	// TrustedProxies are the only peers whose X-Forwarded-For is believed
	// about the client's address (echo's RealIP); none: the peer's address.
	TrustedProxies []netip.Prefix
	// MaxInflightBytes caps the request bytes being served at once
	// (InflightBytes); 0: no cap.
	MaxInflightBytes int64
	// NoMetricsRoute measures requests but leaves /metrics to another
	// listener (the operator one).
	NoMetricsRoute bool
}

// New returns an echo instance with the problem ErrorHandler and the shared
// middleware, outermost first: private answers, recover, request id,
// metrics, request log, recover again (so handler panics are measured and
// logged as 500s), body limit, bytes in flight. With opts.Metrics it also serves GET /metrics, unless
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
	e.IPExtractor = ipExtractor(opts.TrustedProxies)

	e.Use(Private(), Recover(), RequestID())
	if opts.Metrics != nil {
		e.Use(opts.Metrics.Middleware())
	}
	e.Use(RequestLogger(logger), Recover(), BodyLimit(MaxBodyBytes), InflightBytes(opts.MaxInflightBytes))

	if opts.Metrics != nil && !opts.NoMetricsRoute {
		e.Match(ReadMethods, "/metrics", echo.WrapHandler(opts.Metrics.Handler()))
	}
	return e
}

// Private marks every answer as one no cache may keep and no browser may
// take for anything but its declared type: answers carry API keys, webhook
// secrets and recipients' addresses.
func Private() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set("Cache-Control", "no-store")
			h.Set("X-Content-Type-Options", "nosniff")
			return next(c)
		}
	}
}

// ReadMethods are the methods a GET route takes: HEAD is the GET without
// its body (net/http drops what the handler writes), as uptime monitors
// and HTTP clients expect of any server.
var ReadMethods = []string{http.MethodGet, http.MethodHead}

// ipExtractor believes X-Forwarded-For only from trusted proxies; echo
// would otherwise trust any private or loopback peer.
func ipExtractor(proxies []netip.Prefix) echo.IPExtractor {
	if len(proxies) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range proxies {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// Timeouts bound how long one connection may hold the server; zero is no
// bound.
type Timeouts struct {
	Read  time.Duration // a whole request, body included
	Write time.Duration // from the end of a request's headers to the end of its response
	Idle  time.Duration // a keep-alive connection between requests
}

// readHeaderTimeout bounds reading a request's headers.
const readHeaderTimeout = 10 * time.Second

// maxHeaderBytes bounds a request's line and headers (net/http answers 431
// beyond it). Mailroom reads a few short headers; net/http's default of
// 1 MiB would let one request carry a megabyte-long query.
const maxHeaderBytes = 64 << 10

// NewServer returns the server every listener uses, so that slow or idle
// clients cannot hold connections forever. What net/http itself reports
// (accept failing for want of file descriptors, say) goes to log as a
// warning, where a standard logger would write it at info level and never
// fold its once-a-second repeats; a nil log keeps net/http's default.
func NewServer(h http.Handler, t Timeouts, log *slog.Logger) *http.Server {
	h = drainUnread(h, t.Read)
	if t.Write > 0 {
		h = withDeadline(h, t.Write-answerTime(t.Write))
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
	}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	return srv
}

// withDeadline gives each request's context a deadline a little before the
// write timeout. The write timeout alone closes the connection but lets
// the handler go on (waiting on a database that answers nothing, say) and
// leaves the client without an answer; with the deadline the handler's
// calls end and the client still gets its problem (a 503).
func withDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// answerTime is what a request keeps of the write timeout to send its
// answer once its deadline has passed.
func answerTime(write time.Duration) time.Duration { return min(5*time.Second, write/10) }

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

// ReadinessLog logs an instance's readiness when it changes, once however
// many listeners answer its probes: probes come every few seconds, so a
// line per change, not per probe (and never folded as a repeat), saying
// how long the state it ends lasted.
type ReadinessLog struct {
	log *slog.Logger

	mu       sync.Mutex
	answered bool // a probe has been answered: since is the state's start
	notReady bool
	since    time.Time
}

// NewReadinessLog returns a ReadinessLog writing to log (nil: the default
// logger).
func NewReadinessLog(log *slog.Logger) *ReadinessLog {
	if log == nil {
		log = slog.Default()
	}
	return &ReadinessLog{log: log}
}

// note records a probe's answer, err nil meaning ready, and logs it when
// readiness changed; the first answer only when not ready. The lines are
// written under the lock, so they come in the order of the changes.
func (r *ReadinessLog) note(ctx context.Context, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	down := err != nil
	if r.answered && r.notReady == down {
		return
	}
	lasted := time.Since(r.since).Round(time.Millisecond)
	first := !r.answered
	r.answered, r.notReady, r.since = true, down, time.Now()
	switch {
	case first && down:
		r.log.WarnContext(logs.Change(ctx), "not ready", "reason", err.Error())
	case down:
		r.log.WarnContext(logs.Change(ctx), "not ready", "reason", err.Error(), "ready_for", lasted)
	case !first:
		r.log.InfoContext(ctx, "ready again", "not_ready_for", lasted)
	}
}

// Health registers GET (and HEAD) /healthz (liveness: always 200) and GET /readyz (200
// when ready, else a 503 problem "not_ready"). With detail, /readyz says why
// it is not ready (the error text, which readiness checks keep free of
// secrets) and adds the notes to a 200; without (a public listener beside an
// operator one), it says only ready or not ready. A nil ready is always
// ready. Changes are logged to rlog, which the listeners of one instance
// share (nil: a log of this listener's own, to the default logger).
func Health(e *echo.Echo, ready ReadyFunc, detail bool, rlog *ReadinessLog) {
	if rlog == nil {
		rlog = NewReadinessLog(nil)
	}
	e.Match(ReadMethods, "/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.Match(ReadMethods, "/readyz", func(c echo.Context) error {
		body := map[string]any{"status": "ready"}
		if ready != nil {
			ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
			defer cancel()
			notes, err := ready(ctx)
			rlog.note(c.Request().Context(), err)
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
