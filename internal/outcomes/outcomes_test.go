package outcomes_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/mailroom/mailroom/internal/outcomes"
	"github.com/mailroom/mailroom/internal/provider"
)

func TestFiveFailuresInARowMakeTheProviderFailingUntilASendGoesOut(t *testing.T) {
	r := outcomes.New(prometheus.NewRegistry())
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 4 {
		r.Send("retrying", errors.New("connection refused"), at.Add(time.Duration(i)*time.Second))
	}
	if err := r.ProviderFailing(at.Add(4 * time.Second)); err != nil {
		t.Fatalf("after 4 failures: %v", err)
	}
	r.Send("retrying", errors.New("451 try later"), at.Add(5*time.Second))
	err := r.ProviderFailing(at.Add(5 * time.Second))
	if err == nil || !strings.Contains(err.Error(), "5 sends in a row since 2026-05-01T12:00:00Z") || !strings.Contains(err.Error(), "451 try later") {
		t.Fatalf("after 5 failures: %v", err)
	}
	r.Send("sent", nil, at.Add(6*time.Second))
	if err := r.ProviderFailing(at.Add(6 * time.Second)); err != nil {
		t.Fatalf("after a send went out: %v", err)
	}
	if got := testutil.ToFloat64(r.Sends.WithLabelValues("retrying")); got != 5 {
		t.Fatalf("retrying counted %v, want 5", got)
	}
}

// A run of failures stops counting once none has come for RunLapse:
// emails waiting for a provider that is down ask it more often than that,
// so the silence means none is waiting, and a process must not stay
// unready until a send it may never be given comes through.
func TestARunOfFailuresLapsesWhenNoSendAsksTheProvider(t *testing.T) {
	r := outcomes.New(prometheus.NewRegistry())
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 5 {
		r.Send("retrying", errors.New("connection refused"), at.Add(time.Duration(i)*time.Minute))
	}
	last := at.Add(4 * time.Minute)
	if err := r.ProviderFailing(last.Add(outcomes.RunLapse)); err == nil {
		t.Fatal("a run whose last failure is RunLapse old, not more, still counts")
	}
	if err := r.ProviderFailing(last.Add(outcomes.RunLapse + time.Second)); err != nil {
		t.Fatalf("RunLapse after the last failure: %v", err)
	}
	// A failure after the lapse takes the run up again, not from the start.
	r.Send("retrying", errors.New("connection refused"), last.Add(10*time.Minute))
	if err := r.ProviderFailing(last.Add(10 * time.Minute)); err == nil || !strings.Contains(err.Error(), "6 sends in a row") {
		t.Fatalf("a failure after the lapse: %v", err)
	}
}

// An email that gives up on the provider is a failed send, but no sign
// that the provider works again: the run of failures goes on, one longer
// for a transient failure, as long for a throttle (which never counts).
func TestAnEmailGivingUpDoesNotEndTheProvidersRunOfFailures(t *testing.T) {
	r := outcomes.New(prometheus.NewRegistry())
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 4 {
		r.Send("retrying", errors.New("connection refused"), at.Add(time.Duration(i)*time.Second))
	}
	r.GaveUp(&provider.ThrottledError{Reason: "452 mailbox full"}, at.Add(4*time.Second))
	if err := r.ProviderFailing(at.Add(4 * time.Second)); err != nil {
		t.Fatalf("four failures and a throttle: %v", err)
	}
	r.GaveUp(errors.New("connection refused"), at.Add(5*time.Second))
	if err := r.ProviderFailing(at.Add(5 * time.Second)); err == nil || !strings.Contains(err.Error(), "5 sends in a row since 2026-05-01T12:00:00Z") {
		t.Fatalf("four failures and an email giving up after a fifth: %v", err)
	}
	if got := testutil.ToFloat64(r.Sends.WithLabelValues("failed")); got != 2 {
		t.Fatalf("failed counted %v, want 2", got)
	}
	r.Send("failed", &provider.RejectedError{Reason: "550 no such user"}, at.Add(6*time.Second))
	if err := r.ProviderFailing(at.Add(6 * time.Second)); err != nil {
		t.Fatalf("after a rejection, an answer from a provider that works: %v", err)
	}
}

func TestANilRecorderRecordsNothing(t *testing.T) {
	var r *outcomes.Recorder
	r.Send("sent", nil, time.Now())
	r.Fail("suppressed")
	r.GaveUp(errors.New("connection refused"), time.Now())
	r.Attempt(true, time.Second)
	r.ProviderAnswered(time.Second, nil)
}

// Every outcome's series is there before anything happens, so alerts and
// dashboards see a 0 rather than no data.
func TestEveryOutcomeIsExportedFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	outcomes.New(reg)
	want := `# HELP mailroom_emails_failed_total Emails that failed, for whatever reason, by the reason their email.failed event gives.
# TYPE mailroom_emails_failed_total counter
mailroom_emails_failed_total{reason="attachment_download_failed"} 0
mailroom_emails_failed_total{reason="attachments_too_large"} 0
mailroom_emails_failed_total{reason="blocked_attachment_type"} 0
mailroom_emails_failed_total{reason="domain_removed"} 0
mailroom_emails_failed_total{reason="internal_error"} 0
mailroom_emails_failed_total{reason="malware_detected"} 0
mailroom_emails_failed_total{reason="provider_rejected"} 0
mailroom_emails_failed_total{reason="provider_unavailable"} 0
mailroom_emails_failed_total{reason="rendering_failed"} 0
mailroom_emails_failed_total{reason="suppressed"} 0
# HELP mailroom_emails_sent_total Offers of an email to the provider, each try counted, by outcome (sent; failed: rejected, or not accepted in time; retrying; throttled).
# TYPE mailroom_emails_sent_total counter
mailroom_emails_sent_total{outcome="failed"} 0
mailroom_emails_sent_total{outcome="retrying"} 0
mailroom_emails_sent_total{outcome="sent"} 0
mailroom_emails_sent_total{outcome="throttled"} 0
# HELP mailroom_webhook_attempts_total Webhook delivery attempts, by outcome (success, failure).
# TYPE mailroom_webhook_attempts_total counter
mailroom_webhook_attempts_total{outcome="failure"} 0
mailroom_webhook_attempts_total{outcome="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mailroom_emails_failed_total", "mailroom_emails_sent_total", "mailroom_webhook_attempts_total"); err != nil {
		t.Fatal(err)
	}
	for name, series := range map[string]int{"mailroom_provider_send_duration_seconds": 4, "mailroom_webhook_attempt_duration_seconds": 2} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != series {
			t.Errorf("%s: %d series (%v), want %d", name, got, err, series)
		}
	}
}

// Failed emails count under their reason and webhook attempts under their
// outcome, each in its own series.
func TestFailuresAndWebhookAttemptsAreCountedByReasonAndOutcome(t *testing.T) {
	r := outcomes.New(prometheus.NewRegistry())
	r.Fail("suppressed")
	r.Fail("suppressed")
	r.Fail("malware_detected")
	r.Attempt(true, 20*time.Millisecond)
	r.Attempt(false, 10*time.Second)
	r.Attempt(false, 3*time.Second)
	for series, want := range map[prometheus.Counter]float64{
		r.Failures.WithLabelValues("suppressed"):        2,
		r.Failures.WithLabelValues("malware_detected"):  1,
		r.Failures.WithLabelValues("provider_rejected"): 0,
		r.Attempts.WithLabelValues("success"):           1,
		r.Attempts.WithLabelValues("failure"):           2,
	} {
		if got := testutil.ToFloat64(series); got != want {
			t.Errorf("%s = %v, want %v", series.Desc(), got, want)
		}
	}
	for outcome, want := range map[string]histogram{"success": {1, 0.02}, "failure": {2, 13}} {
		if got := observed(t, r.AttemptDurations, outcome); got != want {
			t.Errorf("webhook attempt durations, %s: %+v, want %+v", outcome, got, want)
		}
	}
}

// Each provider answer's time is observed under what the answer was, so a
// provider that has slowed down shows apart from one that refuses fast.
func TestProviderAnswerTimesAreObservedByAnswer(t *testing.T) {
	r := outcomes.New(prometheus.NewRegistry())
	r.ProviderAnswered(50*time.Millisecond, nil)
	r.ProviderAnswered(150*time.Millisecond, nil)
	r.ProviderAnswered(2*time.Second, &provider.ThrottledError{Reason: "454 Throttling failure"})
	r.ProviderAnswered(time.Second, &provider.RejectedError{Code: "MessageRejected"})
	r.ProviderAnswered(30*time.Second, errors.New("i/o timeout"))
	for outcome, want := range map[string]histogram{"accepted": {2, 0.2}, "throttled": {1, 2}, "rejected": {1, 1}, "error": {1, 30}} {
		if got := observed(t, r.SendDurations, outcome); got != want {
			t.Errorf("provider answer times, %s: %+v, want %+v", outcome, got, want)
		}
	}
}

type histogram struct {
	count uint64
	sum   float64 // seconds, to the millisecond
}

func observed(t *testing.T, h *prometheus.HistogramVec, outcome string) histogram {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(outcome).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return histogram{m.GetHistogram().GetSampleCount(), math.Round(m.GetHistogram().GetSampleSum()*1000) / 1000}
}

// What /readyz says of a failing provider keeps the provider's last answer
// but not the recipient it names.
func TestTheProviderFailureReportNamesNoRecipient(t *testing.T) {
	r := outcomes.New(prometheus.NewRegistry())
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for range 5 {
		r.Send("retrying", errors.New("451 4.7.1 <alice@example.com>: greylisted"), at)
	}
	err := r.ProviderFailing(at)
	if err == nil || strings.Contains(err.Error(), "alice") || !strings.Contains(err.Error(), "greylisted") {
		t.Fatalf("provider failing: %v", err)
	}
}
