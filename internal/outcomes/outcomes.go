// Package outcomes counts what the workers do, for /metrics, and remembers
// whether the provider has been failing, for /readyz.
package outcomes

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/logs"
	"github.com/mailroom/mailroom/internal/provider"
)

// Recorder counts sends, failed emails and webhook attempts by outcome, and
// tracks a run of provider failures. A nil Recorder records nothing.
type Recorder struct {
	Sends    *prometheus.CounterVec // mailroom_emails_sent_total{outcome}
	Failures *prometheus.CounterVec // mailroom_emails_failed_total{reason}
	Attempts *prometheus.CounterVec // mailroom_webhook_attempts_total{outcome}

	// How long the provider and the receivers take to answer: a slow
	// provider or receiver shows here before it shows as a backlog.
	SendDurations    *prometheus.HistogramVec // mailroom_provider_send_duration_seconds{outcome}
	AttemptDurations *prometheus.HistogramVec // mailroom_webhook_attempt_duration_seconds{outcome}

	mu          sync.Mutex
	failing     int // consecutive transient provider failures
	lastFailure string
	since, last time.Time // of the run's first and last failure
}

// RunLapse is how long after its last failure a run of failures stops
// counting. While emails wait for a provider that is down, each asks it
// again at least every minute and a quarter (the longest retry wait), so a
// longer silence means none is waiting: nothing shows the provider still
// down, and a process that reported it would stay unready until a send
// came through it, which a load balancer trusting /readyz would never let
// happen.
const RunLapse = 3 * time.Minute

// New registers the counters on reg.
func New(reg prometheus.Registerer) *Recorder {
	o := &Recorder{
		Sends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailroom_emails_sent_total",
			Help: "Offers of an email to the provider, each try counted, by outcome (sent; failed: rejected, or not accepted in time; retrying; throttled)."}, []string{"outcome"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailroom_emails_failed_total",
			Help: "Emails that failed, for whatever reason, by the reason their email.failed event gives."}, []string{"reason"}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailroom_webhook_attempts_total",
			Help: "Webhook delivery attempts, by outcome (success, failure)."}, []string{"outcome"}),
	}
	// Up to the SMTP provider's 30 s command timeout and the receivers'
	// 10 s, beyond which a wait ends in an error (counted above 30 s).
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	o.SendDurations = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mailroom_provider_send_duration_seconds",
		Help: "Time the provider took to answer each offer of an email, by its answer (accepted, throttled, rejected, error).", Buckets: buckets}, []string{"outcome"})
	o.AttemptDurations = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mailroom_webhook_attempt_duration_seconds",
		Help: "Time each webhook delivery attempt took, to the receiver's answer or the failure, by outcome (success, failure).", Buckets: buckets}, []string{"outcome"})
	reg.MustRegister(o.Sends, o.Failures, o.Attempts, o.SendDurations, o.AttemptDurations)
	// Every series exists from the start, so an alert on it sees 0, not nothing.
	for _, outcome := range []string{"sent", "failed", "retrying", "throttled"} {
		o.Sends.WithLabelValues(outcome)
	}
	for _, reason := range email.Reasons {
		o.Failures.WithLabelValues(reason)
	}
	for _, outcome := range []string{"success", "failure"} {
		o.Attempts.WithLabelValues(outcome)
		o.AttemptDurations.WithLabelValues(outcome)
	}
	for _, outcome := range []string{"accepted", "throttled", "rejected", "error"} {
		o.SendDurations.WithLabelValues(outcome)
	}
	return o
}

// Send records an email handed to the provider or not: outcome is sent,
// failed, retrying (a transient provider failure, err) or throttled.
func (o *Recorder) Send(outcome string, err error, now time.Time) {
	if o == nil {
		return
	}
	o.Sends.WithLabelValues(outcome).Inc()
	o.mu.Lock()
	defer o.mu.Unlock()
	if outcome != "retrying" {
		o.failing = 0
		return
	}
	o.failed(err, now)
}

// GaveUp records an email failed because the provider did not accept it
// within its maximum age, err being the provider's last answer. It counts
// as failed, but unlike a rejection it is no answer from a provider that
// works: it never ends a run of failures, so /readyz keeps reporting a
// provider that is still down while the oldest emails give up on it. A
// transient failure counts as one more in the run; a throttle, which is
// slowing down and not failing, does not.
func (o *Recorder) GaveUp(err error, now time.Time) {
	if o == nil {
		return
	}
	o.Sends.WithLabelValues("failed").Inc()
	if provider.IsThrottled(err) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed(err, now)
}

// failed counts a transient provider failure in the run; o.mu is held.
func (o *Recorder) failed(err error, now time.Time) {
	if o.failing == 0 {
		o.since = now
	}
	o.failing++
	o.last = now
	o.lastFailure = logs.Redacted(err) // readiness shows it, and the log keeps it
}

// Fail records an email that failed, with its reason.
func (o *Recorder) Fail(reason string) {
	if o == nil {
		return
	}
	o.Failures.WithLabelValues(reason).Inc()
}

// ProviderAnswered records how long the provider took to give err as its
// answer to one offer of an email.
func (o *Recorder) ProviderAnswered(took time.Duration, err error) {
	if o == nil {
		return
	}
	var rejected *provider.RejectedError
	outcome := "accepted"
	switch {
	case provider.IsThrottled(err):
		outcome = "throttled"
	case errors.As(err, &rejected):
		outcome = "rejected"
	case err != nil:
		outcome = "error"
	}
	o.SendDurations.WithLabelValues(outcome).Observe(took.Seconds())
}

// Attempt records a webhook delivery attempt and how long it took.
func (o *Recorder) Attempt(success bool, took time.Duration) {
	if o == nil {
		return
	}
	outcome := "failure"
	if success {
		outcome = "success"
	}
	o.Attempts.WithLabelValues(outcome).Inc()
	o.AttemptDurations.WithLabelValues(outcome).Observe(took.Seconds())
}

// ProviderFailing reports a provider whose last sends have all failed,
// five or more in a row, the last within RunLapse of now.
func (o *Recorder) ProviderFailing(now time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing >= 5 && now.Sub(o.last) <= RunLapse {
		return fmt.Errorf("the mail provider has failed %d sends in a row since %s: %s", o.failing, o.since.UTC().Format(time.RFC3339), o.lastFailure)
	}
	return nil
}
