package app

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// meteredStore times appends for /metrics.
type meteredStore struct {
	eventstore.Store
	appends *prometheus.HistogramVec
}

func meter(s eventstore.Store, reg prometheus.Registerer) *meteredStore {
	m := &meteredStore{Store: s, appends: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mailroom_eventstore_append_duration_seconds",
		Help:    "Time to append to a stream, by outcome (ok, conflict, error).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"outcome"})}
	reg.MustRegister(m.appends)
	return m
}

func (m *meteredStore) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	start := time.Now()
	res, err := m.Store.Append(ctx, stream, expected, events...)
	m.observe(start, err)
	return res, err
}

func (m *meteredStore) AppendMany(ctx context.Context, parts ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	start := time.Now()
	res, err := m.Store.AppendMany(ctx, parts...)
	m.observe(start, err)
	return res, err
}

// observe records an append that began at start, by its outcome.
func (m *meteredStore) observe(start time.Time, err error) {
	outcome := "ok"
	switch {
	case eventstore.IsConflict(err):
		outcome = "conflict"
	case err != nil:
		outcome = "error"
	}
	m.appends.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
}

// Ping passes through to the store.
func (m *meteredStore) Ping(ctx context.Context) error { return eventstore.Ping(ctx, m.Store) }

// CountAfter passes through to stores that can count.
func (m *meteredStore) CountAfter(ctx context.Context, from eventstore.Position, limit int64) (int64, error) {
	c, ok := m.Store.(eventstore.Counter)
	if !ok {
		return 0, errors.ErrUnsupported
	}
	return c.CountAfter(ctx, from, limit)
}

// projectionCollector reports, when scraped, each projection's lag, the
// streams it has quarantined, and whether its batches are failing.
type projectionCollector struct {
	runner                    *projections.Runner
	lag, quarantined, failing *prometheus.Desc
}

func newProjectionCollector(r *projections.Runner) *projectionCollector {
	label := []string{"projection"}
	return &projectionCollector{runner: r,
		lag: prometheus.NewDesc("mailroom_projection_lag_events",
			"Events in the log that a projection has not applied yet.", label, nil),
		quarantined: prometheus.NewDesc("mailroom_projection_quarantined_streams",
			"Streams a projection skips because one of their events could not be applied (see mailroom projections status).", label, nil),
		failing: prometheus.NewDesc("mailroom_projection_failing",
			"1 while a projection's batches fail for a reason other than one event's data; it applies nothing meanwhile.", label, nil),
	}
}

func (c *projectionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.quarantined
	ch <- c.failing
}

func (c *projectionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.runner.Status(ctx, projections.MetricsLagCap)
	if err != nil {
		for _, d := range []*prometheus.Desc{c.lag, c.quarantined, c.failing} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return
	}
	for _, s := range st {
		failing := 0.0
		if s.Failing != nil {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(s.Lag), s.Name)
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, float64(len(s.Quarantined)), s.Name)
		ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, failing, s.Name)
	}
}

// gauge is a gauge read from the database at each scrape; one that cannot
// be read is left out of that scrape (an invalid metric), not reported as 0.
type gauge struct {
	desc *prometheus.Desc
	read func(ctx context.Context) (float64, error)
}

func newGauge(name, help string, read func(ctx context.Context) (float64, error)) *gauge {
	return &gauge{desc: prometheus.NewDesc(name, help, nil, nil), read: read}
}

func (g *gauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *gauge) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := g.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
}

// newStuckCollector counts emails accepted more than 15 minutes ago that
// have not left the service: the first sign of a pipeline or provider
// problem.
func newStuckCollector(pool *pgxpool.Pool) *gauge {
	return newGauge("mailroom_emails_stuck", "Emails queued more than 15 minutes ago that have not left the service.",
		func(ctx context.Context) (float64, error) {
			n, err := readapi.StuckEmails(ctx, pool, 15*time.Minute)
			return float64(n), err
		})
}

// newKeyCounter counts the DKIM keys commands make: each is an RSA-2048
// generation, the costliest thing a request can ask for.
func newKeyCounter(reg prometheus.Registerer) func() {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "mailroom_dkim_keys_generated_total",
		Help: "DKIM keys generated (domain adds, rotations, upgrades)."})
	reg.MustRegister(c)
	return c.Inc
}

// maxClockSkew is the difference between a process's clock and
// PostgreSQL's past which a process warns at start. Receivers refuse
// webhook signatures five minutes off; jobs start late by the skew.
const maxClockSkew = time.Second

// clockSkew is this process's clock minus PostgreSQL's, measured at the
// middle of one round trip.
func clockSkew(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	before := time.Now()
	var db time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return 0, err
	}
	after := time.Now()
	return before.Add(after.Sub(before) / 2).Sub(db), nil
}

// newClockCollector exports clockSkew at each scrape.
func newClockCollector(pool *pgxpool.Pool) *gauge {
	return newGauge("mailroom_clock_skew_seconds",
		"This process's clock minus PostgreSQL's: job schedules, webhook signature times and recorded times follow each process's clock.",
		func(ctx context.Context) (float64, error) {
			skew, err := clockSkew(ctx, pool)
			return skew.Seconds(), err
		})
}

// newHeldBackCollector exports how many committed events readers cannot
// read yet because a transaction older than them is still open on the
// server.
func newHeldBackCollector(store *postgres.Store) *gauge {
	return newGauge("mailroom_events_held_back",
		"Events committed but not yet readable because an older transaction is still open on the PostgreSQL server (counted up to 10,000).",
		func(ctx context.Context) (float64, error) {
			n, err := store.HeldBack(ctx, projections.MetricsLagCap)
			return float64(n), err
		})
}

// tenureCollector reports, when scraped, what each of the workers' log
// readers and lock holders is doing: 1 for its current state, 0 for the
// others. A process whose readers cannot open their lock connections sends
// nothing while its API and pool answer.
type tenureCollector struct {
	tenures *pglock.Tenures
	state   *prometheus.Desc
}

func newTenureCollector(t *pglock.Tenures) *tenureCollector {
	return &tenureCollector{tenures: t, state: prometheus.NewDesc("mailroom_worker_state",
		"What each of a worker process's log readers and lock holders is doing: active (holds its lock and works), standby (another process holds it) or failing (cannot take or keep it; it tries again).",
		[]string{"worker", "state"}, nil)}
}

func (c *tenureCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.state }

func (c *tenureCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.tenures.List() {
		for _, s := range pglock.States {
			v := 0.0
			if t.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, t.Name, string(s))
		}
	}
}

// backlogCollector reports, when scraped, the job queue's jobs not done
// yet by queue and state: a provider or receiver in trouble shows as jobs
// that wait, before any email is stuck long enough to count.
type backlogCollector struct {
	pool *pgxpool.Pool
	jobs *prometheus.Desc
}

func newBacklogCollector(pool *pgxpool.Pool) *backlogCollector {
	return &backlogCollector{pool: pool, jobs: prometheus.NewDesc("mailroom_jobs",
		"Jobs of the job queue not done yet, by queue (email: sends; webhook: fan-outs and attempts) and state (available: due; scheduled: due later, retries and waits among them; retryable; running), each counted up to 10,000.",
		[]string{"queue", "state"}, nil)}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.jobs }

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := jobs.Backlogs(ctx, c.pool, projections.MetricsLagCap)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.jobs, err)
		return
	}
	for _, b := range counts {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(b.Jobs), b.Queue, b.State)
	}
}
