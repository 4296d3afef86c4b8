package processmanagers_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/processmanagers"
)

// These tests work send jobs as River does (rivertest), each in a
// transaction of the rig's database, so what a job keeps in its metadata
// between tries is what River keeps.

// worker is a River worker of send jobs on w, whose jobs time out after
// timeout (0: River's default).
func worker(t *testing.T, w *processmanagers.SendWorker, timeout time.Duration) *rivertest.Worker[processmanagers.SendArgs, pgx.Tx] {
	t.Helper()
	return rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{JobTimeout: timeout}, river.Worker[processmanagers.SendArgs](w))
}

// begin opens a transaction on the rig's database, rolled back when t ends.
func (r *pipelineRig) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := r.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// sendArgs is the send job of the email's EmailQueued.
func sendArgs(id string) processmanagers.SendArgs {
	return processmanagers.SendArgs{EmailID: id, AccountID: "acct-1", EventID: "ev-" + id, Position: eventstore.Start.String()}
}

// However small MAILROOM_MAX_SENDING_BYTES is, an email without
// attachments goes out: one that outweighs the quarter kept for small
// emails takes all of it, as a large one takes all of the rest, rather
// than waiting for room that can never be.
func TestAnEmailHeavierThanTheSmallEmailsShareStillGoesOut(t *testing.T) {
	r := newPipelineRig(t)
	id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
	n := int64(200 << 10)
	small := n / 4 // as the application divides it: the email weighs 64 KiB and more
	w := &processmanagers.SendWorker{Pipeline: r.pipeline, Memory: processmanagers.NewRoom(n - small), SmallMemory: processmanagers.NewSmallRoom(small)}
	res, err := worker(t, w, 0).Work(context.Background(), t, r.begin(t), sendArgs(id), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.EventKind != river.EventKindJobCompleted || !slices.Contains(r.types(t, id), "EmailSent") {
		t.Fatalf("job %s, email stream %q: want the email sent at its first try", res.EventKind, r.types(t, id))
	}
}

// A message the provider accepted is handed over once, however long the
// database refuses to record it and whichever worker process takes its
// job next: the job keeps the provider's answer with it, and its next try
// records it without checking or sending again.
func TestAcceptedMessageIsNotSentAgainWhileItCannotBeRecorded(t *testing.T) {
	r := newPipelineRig(t)
	store := &refusingAppends{Store: r.store}
	now := func() time.Time { return r.now }
	box, _ := secretbox.New(make([]byte, 32))
	r.pipeline.Commands = commands.New(commands.Deps{Store: store, Now: now, Box: box, Content: r.content})
	var sends atomic.Int32
	r.sender = sendFunc(func(ctx context.Context, m provider.Outbound) (string, error) {
		sends.Add(1)
		return "msg-1", nil
	})
	id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
	// Two worker processes: the same configuration, each its own values.
	processes := make([]*processmanagers.SendWorker, 2)
	for i := range processes {
		p := *r.pipeline
		processes[i] = &processmanagers.SendWorker{Pipeline: &p}
	}
	tx := r.begin(t)
	ctx := context.Background()
	store.refuse.Store(true)
	res, err := worker(t, processes[0], 300*time.Millisecond).Work(ctx, t, tx, sendArgs(id), nil)
	for try := 1; ; try++ { // tries cut off by their deadline, in one process and then the other
		if err != nil || res.EventKind != river.EventKindJobSnoozed {
			t.Fatalf("try %d while appends fail: %v, job %s; want it snoozed", try, err, res.EventKind)
		}
		if try == 3 {
			break
		}
		res, err = worker(t, processes[try%2], 300*time.Millisecond).WorkJob(ctx, t, tx, res.Job)
	}
	// What changed meanwhile does not matter: the message has left.
	r.checks = processmanagers.Checks{Suppressed: []string{"ann@example.org"}}
	store.refuse.Store(false)
	if res, err = worker(t, processes[1], 0).WorkJob(ctx, t, tx, res.Job); err != nil || res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("the try once appends pass: %v, job %s", err, res.EventKind)
	}
	if n := sends.Load(); n != 1 {
		t.Fatalf("the provider was handed the message %d times, want once", n)
	}
	if got := r.types(t, id); !slices.Contains(got, "EmailSent") || slices.Contains(got, "EmailFailed") {
		t.Fatalf("email stream %q: want the send recorded, and no failure", got)
	}
}

// A send job queued by a release that kept no stories carries no
// correlation id: what it records still continues the send request's
// story, the one its EmailQueued carries, and names that EmailQueued as
// its cause.
func TestASendJobWithoutACorrelationIDKeepsTheSendRequestsStory(t *testing.T) {
	r := newPipelineRig(t)
	const req = "req_KVJB4SPMNTMG3XJJVNZVK6RUCK"
	id := r.queueAs(t, eventstore.Metadata{Actor: "apikey:k_test", RequestID: req, CorrelationID: req, CausationID: req},
		"<p>Hi</p>", []string{"ann@example.org"})
	ctx := context.Background()
	recs, err := r.store.ReadStream(ctx, email.Stream(id), 0, 1)
	if err != nil || len(recs) != 1 {
		t.Fatalf("the EmailQueued: %v, %d events", err, len(recs))
	}
	queued := recs[0].ID.String()
	args := processmanagers.SendArgs{EmailID: id, AccountID: "acct-1", EventID: queued, Position: recs[0].Position.String()}
	res, err := worker(t, &processmanagers.SendWorker{Pipeline: r.pipeline}, 0).Work(ctx, t, r.begin(t), args, nil)
	if err != nil || res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("job: %v, %s", err, res.EventKind)
	}
	recs, err = r.store.ReadStream(ctx, email.Stream(id), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	for _, rec := range recs[1:] {
		md := rec.Metadata
		if md.RequestID != req || md.CorrelationID != req || md.CausationID != queued {
			t.Errorf("%s: request_id %q, correlation_id %q, causation_id %q; want %q, %q, %q",
				rec.Type, md.RequestID, md.CorrelationID, md.CausationID, req, req, queued)
		}
		checked = append(checked, rec.Type)
	}
	if !slices.Contains(checked, "EmailScanned") || !slices.Contains(checked, "EmailSent") {
		t.Fatalf("recorded %q, want EmailScanned and EmailSent", checked)
	}
}
