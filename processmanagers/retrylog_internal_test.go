package processmanagers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/logs"
)

// Every email the provider does not take for now writes one warning per
// window between them, however many wait, and so does every email held
// back by another shared trouble (the blob store denied); an email held
// back by a cause of its own (its stored body missing) keeps a line of its
// own, so the outage's lines do not hide it.
func TestRetryWarningsFoldWhatManyEmailsShare(t *testing.T) {
	var b bytes.Buffer
	w := &SendWorker{Retry: jobs.Backoff{Min: time.Second, Max: time.Minute},
		Log: slog.New(logs.Fold(slog.NewJSONHandler(&b, nil), time.Hour))}
	retry := func(id string, err error) {
		job := &river.Job[SendArgs]{JobRow: &rivertype.JobRow{Metadata: []byte(`{"send_tries":1}`)}, Args: SendArgs{EmailID: id}}
		w.outcome(context.Background(), job, Transient(err))
	}
	for i := range 50 {
		retry(fmt.Sprint("down-", i), &providerTrouble{errors.New("smtp connect via relay:25: connection refused")})
	}
	for i := range 3 {
		retry(fmt.Sprint("own-", i), fmt.Errorf("blob emails/e/body: %w", blob.ErrNotFound))
	}
	retry("damaged", fmt.Errorf("blob emails/d/body: %w", blob.ErrCorrupt))
	retry("keyless", fmt.Errorf("blob sha256:k of email keyless: %w", datakeys.ErrNoKey))
	retry("unopened", fmt.Errorf("blob sha256:u of email unopened: %w", datakeys.ErrCannotOpen))
	for i := range 20 {
		retry(fmt.Sprint("store-", i), fmt.Errorf("blob: put sha256:%d: open /blobs/x: permission denied", i))
	}
	out := b.String()
	if n := strings.Count(out, "provider did not take the email for now"); n != 1 {
		t.Errorf("%d lines for the provider's outage, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, `"msg":"email send will be retried"`); n != 7 {
		t.Errorf("%d lines for emails held back by their own cause and by the blob store, want 6 and 1:\n%s", n, out)
	}
}
