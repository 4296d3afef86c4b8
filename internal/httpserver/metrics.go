package httpserver

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics owns the service's Prometheus registry and the HTTP metrics.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics creates a registry with the Go and process collectors and the
// HTTP request metrics.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_http_requests_total",
			Help: "HTTP requests by method, route template and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mailroom_http_request_duration_seconds",
			Help:    "HTTP request duration by method and route template.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests,
		m.duration,
	)
	return m
}

// Registry is where other packages register their collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format. A
// collector that fails (a read model missing) leaves out its own metrics
// only, so the others still tell what is wrong.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// Middleware records each request's count and duration, labelled by the
// route template (never the raw URL) so cardinality stays bounded.
func (m *Metrics) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			if err := next(c); err != nil {
				// Write the error now so its status is what gets recorded.
				c.Error(err)
			}
			route := routeLabel(c)
			method := methodLabel(c.Request().Method)
			m.requests.WithLabelValues(method, route, strconv.Itoa(c.Response().Status)).Inc()
			m.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
			return nil
		}
	}
}

// routeLabel is the matched route template, or "unmatched".
func routeLabel(c echo.Context) string {
	if unmatched, _ := c.Get(unmatchedKey).(bool); unmatched || c.Path() == "" {
		return "unmatched"
	}
	return c.Path()
}

// methodLabel bounds the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}
