package processmanagers

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// A receiver's Retry-After is read as seconds or as an HTTP date; a number
// too large for a Duration asks for the longest wait, never a short one.
func TestRetryAfterReadsSecondsDatesAndHugeNumbers(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"99999999", maxRetryAfter},
		{"9223372037", maxRetryAfter},
		{"18446744074", maxRetryAfter},
		{"184467440737095516160", maxRetryAfter},
	} {
		if got := retryAfter(c.header, now); got != c.want {
			t.Errorf("Retry-After %q: %v, want %v", c.header, got, c.want)
		}
	}
}

// A send's retries are counted apart from River's snoozes, which also count
// the waits for an account's slot or for memory: an email that waited its
// turn ten times and then fails for now is on its first retry.
func TestSendTriesIgnoreWaitsForATurn(t *testing.T) {
	ctx := context.Background()
	if n := retried(ctx, []byte(`{"snoozes": 10}`)); n != 1 {
		t.Fatalf("first failure after ten waits is try %d", n)
	}
	if n := retried(ctx, []byte(`{"snoozes": 14, "send_tries": 2}`)); n != 3 {
		t.Fatalf("third failure is try %d", n)
	}
}
