package app

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/httpserver"
)

// Listeners are the addresses a process serves on. They are bound and
// served from the very start, before the database is migrated and the
// read models prepared: a start may take long (rebuilding a projection of
// a large log, or waiting for another process to rebuild it), and a
// process that answered nothing meanwhile would be restarted by its
// liveness probe, its start begun afresh, for ever. While the process
// starts, /healthz answers 200, /readyz 503 with what it is doing and
// /metrics the process's metrics, mailroom_starting at 1 among them (a
// scrape that failed for as long as a start takes would page as a target
// down); every other route answers 503. Serve then puts the roles' handlers
// on the same listeners. Bound first also means a taken address stops the
// process before it tells anyone it is ready.
type Listeners struct {
	public, ops net.Listener
	servers     []*http.Server
	handlers    []*handlerSlot
	served      chan error // each server's end, one per server
	phase       atomic.Pointer[string]
	metrics     *httpserver.Metrics
	starting    prometheus.Gauge
}

// Listen binds the configured addresses and serves them at once with the
// answers of a starting process (see Listeners).
func Listen(cfg config.Config, log *slog.Logger) (*Listeners, error) {
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.Setting("http-addr"), err)
	}
	l := &Listeners{public: ln, metrics: httpserver.NewMetrics()}
	l.starting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mailroom_starting",
		Help: "1 while the process starts (migrating, preparing read models, waiting for another process's rebuild), 0 once it serves.",
	})
	l.starting.Set(1)
	l.metrics.Registry().MustRegister(l.starting)
	if cfg.OpsAddr != "" {
		if l.ops, err = net.Listen("tcp", cfg.OpsAddr); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s: %w", config.Setting("ops-addr"), err)
		}
	}
	l.Starting("connecting to the database")
	// The public listener tells why only where no operator listener does.
	lns := []net.Listener{l.public}
	detail := []bool{cfg.OpsAddr == ""}
	if l.ops != nil {
		lns, detail = append(lns, l.ops), append(detail, true)
	}
	l.served = make(chan error, len(lns))
	for i, ln := range lns {
		slot := &handlerSlot{}
		slot.set(l.startingHandler(log, detail[i]))
		srv := newHTTPServer(cfg, slot, log)
		l.servers, l.handlers = append(l.servers, srv), append(l.handlers, slot)
		log.Info("listening", "addr", ln.Addr().String())
		go func() { l.served <- srv.Serve(ln) }()
	}
	return l, nil
}

// Addr is the address the API (or, in a process without the api role,
// the health endpoints) is served on.
func (l *Listeners) Addr() net.Addr { return l.public.Addr() }

// Starting says what the start is doing, for /readyz. A nil l (an app
// opened without listeners, by an operator command) takes no note.
func (l *Listeners) Starting(what string) {
	if l != nil {
		l.phase.Store(&what)
	}
}

// Metrics is the registry the process's metrics go to, served from the
// start. A nil l (an operator command) has one of its own.
func (l *Listeners) Metrics() *httpserver.Metrics {
	if l == nil {
		return httpserver.NewMetrics()
	}
	return l.metrics
}

// serve puts the started process's handlers on the listeners.
func (l *Listeners) serve(public, ops http.Handler) {
	l.handlers[0].set(public)
	if len(l.handlers) > 1 {
		l.handlers[1].set(ops)
	}
	l.starting.Set(0)
}

// Close stops serving: for a process that stops before it serves.
func (l *Listeners) Close() {
	for _, srv := range l.servers {
		srv.Close()
	}
}

// startingHandler answers while the process starts: alive ({"status":
// "starting"}, where a serving process says "ok"), not ready and, with
// detail, what it is doing and its metrics.
func (l *Listeners) startingHandler(log *slog.Logger, detail bool) http.Handler {
	e := httpserver.New(httpserver.Options{Logger: log, Metrics: l.metrics, NoMetricsRoute: !detail})
	e.Match(httpserver.ReadMethods, "/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "starting"})
	})
	e.Match(httpserver.ReadMethods, "/readyz", func(echo.Context) error {
		if !detail {
			return httpserver.NewProblem(http.StatusServiceUnavailable, "not_ready", "the service is not ready")
		}
		return httpserver.NewProblem(http.StatusServiceUnavailable, "not_ready", "starting: "+*l.phase.Load())
	})
	e.RouteNotFound("/*", func(echo.Context) error {
		p := httpserver.NewProblem(http.StatusServiceUnavailable, "not_ready", "the service is starting")
		p.RetryAfter = 5 * time.Second
		return p
	})
	return e
}

// wait returns when every server has been shut down, or at once with the
// error of one that stopped by itself (so the others are drained).
func (l *Listeners) wait() error {
	for range l.servers {
		if err := <-l.served; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return nil
}

// handlerSlot is a server's handler, replaced when the process has started.
type handlerSlot struct{ h atomic.Pointer[http.Handler] }

func (s *handlerSlot) set(h http.Handler) { s.h.Store(&h) }

func (s *handlerSlot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}
