package processmanagers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"golang.org/x/sync/semaphore"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/logs"
	"github.com/mailroom/mailroom/internal/provider"
)

// EmailReaderName names the reader that plans sends, and its checkpoint.
const EmailReaderName = "email-pipeline"

// EmailShardCheckpoints matches the checkpoints of the sharded handlers
// the email reader replaced (email-pipeline-0-of-8, …); the reader starts at
// the lowest of them, and the email streams make a repeated send a no-op.
const EmailShardCheckpoints = "email-pipeline-%-of-%"

// SendArgs is the job of taking one email on after one of its events
// (EmailQueued or EmailReleased). It is unique by event: the reader inserts
// each event's job once, and River refuses a second one even so.
type SendArgs struct {
	EmailID string `json:"email_id"`
	// AccountID (from EmailQueued) lets the worker check the account's cap
	// before reading anything; EmailReleased does not carry it, so its job
	// reads the stream first.
	AccountID string `json:"account_id,omitempty"`
	EventID   string `json:"event_id" river:"unique"`
	Position  string `json:"position"` // of the event, for read-your-writes
	// CorrelationID is the event's: the email's events keep its story.
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Kind implements river.JobArgs.
func (SendArgs) Kind() string { return "email_send" }

// sendMaxAttempts bounds the retries of a job that keeps failing with an
// error not marked Transient (a bug, a malformed stream): it is then
// discarded and stays in river_job for an operator, as the poison queue
// kept such events. Transient failures snooze and never use attempts up.
const sendMaxAttempts = 5

// PlanSends is the email reader's plan: one send job per EmailQueued and
// EmailReleased.
func PlanSends(_ context.Context, ev eventstore.RecordedEvent) ([]river.InsertManyParams, error) {
	if ev.Type != (&email.Queued{}).EventType() && ev.Type != (&email.Released{}).EventType() {
		return nil, nil
	}
	var e struct {
		EmailID   string `json:"email_id"`
		AccountID string `json:"account_id"`
	}
	if err := json.Unmarshal(ev.Data, &e); err != nil || e.EmailID == "" {
		return nil, jobs.Malformed(fmt.Errorf("%s without an email id: %v", ev.Type, err))
	}
	return []river.InsertManyParams{{
		Args: SendArgs{EmailID: e.EmailID, AccountID: e.AccountID, EventID: ev.ID.String(), Position: ev.Position.String(),
			CorrelationID: ev.Metadata.CorrelationID},
		InsertOpts: &river.InsertOpts{
			Queue: jobs.EmailQueue, MaxAttempts: sendMaxAttempts,
			UniqueOpts: river.UniqueOpts{ByArgs: true},
		},
	}}, nil
}

// SendWorker works send jobs: Pipeline.Process under a per-account cap.
// Jobs of different emails run concurrently (up to the queue's
// concurrency); an email has a job only once an event asked for one, and
// the next such event (EmailReleased) follows the hold its job recorded
// last, so one email's work never overlaps itself.
type SendWorker struct {
	river.WorkerDefaults[SendArgs]
	Pipeline *Pipeline
	Accounts *AccountSlots
	// Memory and SmallMemory bound the attachment bytes of the emails
	// this process prepares and sends at once (nil: no bound): Memory
	// those of emails with 1 MiB or more, which take turns, shared
	// between accounts; SmallMemory the others', which never wait behind
	// a large one. Each email is held whole, several times over
	// (downloaded, sealed, rendered in base64), so a burst of large
	// emails would otherwise take gigabytes.
	Memory      *Room
	SmallMemory *SmallRoom
	// Retry is the wait before a transient failure is tried again.
	Retry jobs.Backoff
	Log   *slog.Logger
}

// Work implements river.Worker.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	meta := pipelineMeta.Following(job.Args.EventID, job.Args.CorrelationID)
	if job.Args.CorrelationID == "" { // queued by a release that kept no stories: the email's
		meta = w.Pipeline.Commands.EmailStory(ctx, job.Args.EmailID, job.Args.EventID, pipelineMeta)
	}
	// Accepted by the provider on an earlier try, in this process or
	// another: only the record is left, whatever the checks would say now,
	// and it takes neither a slot nor memory.
	if k, ok := acceptedEarlier(job.Metadata); ok {
		return w.outcome(ctx, job, w.Pipeline.recordAccepted(ctx, job.Args.EmailID, k, meta))
	}
	pos, err := eventstore.ParsePosition(job.Args.Position)
	if err != nil {
		return err
	}
	// The cap is checked before any read, so a job over it costs one
	// fetch and one snooze, nothing more.
	account := job.Args.AccountID
	if account != "" {
		if !w.Accounts.Acquire(account) {
			return river.JobSnooze(overCapWait())
		}
		defer w.Accounts.Release(account)
	}
	st, ver, err := w.Pipeline.Commands.EmailAt(ctx, job.Args.EmailID)
	if err != nil {
		return w.outcome(ctx, job, Transient(err))
	}
	if account == "" && st.Exists() { // EmailReleased: the account is on the stream
		account = st.Queued.AccountID
		if !w.Accounts.Acquire(account) {
			return river.JobSnooze(overCapWait())
		}
		defer w.Accounts.Release(account)
	}
	var lease *Lease
	if n := MemoryWeight(st); w.Memory != nil && n >= smallAttachments {
		var ok bool
		if lease, ok = w.Memory.Take(ctx, account, n); !ok {
			return river.JobSnooze(overCapWait())
		}
		defer lease.Release()
	} else if w.SmallMemory != nil {
		release, ok := w.SmallMemory.TryTake(n)
		if !ok {
			return river.JobSnooze(overCapWait())
		}
		defer release()
	}
	return w.outcome(ctx, job, w.Pipeline.process(ctx, st, ver, pos, lease, meta))
}

// SmallRoom is the part of SendWorker's memory bound kept for emails with
// small attachments or none, which take it without waiting in turn. An
// email that weighs more than all of it takes all of it, as Room does a
// large one, rather than waiting for room that can never be.
type SmallRoom struct {
	sem  *semaphore.Weighted
	size int64
}

// NewSmallRoom returns a SmallRoom of size bytes.
func NewSmallRoom(size int64) *SmallRoom {
	return &SmallRoom{sem: semaphore.NewWeighted(size), size: size}
}

// TryTake takes room for an email of weight n, or reports false while
// others hold it; release gives it back.
func (r *SmallRoom) TryTake(n int64) (release func(), ok bool) {
	n = min(n, r.size)
	if !r.sem.TryAcquire(n) {
		return nil, false
	}
	return func() { r.sem.Release(n) }, true
}

// acceptedKey names, in a send job's metadata, the provider's acceptance
// of a message whose EmailSent could not be recorded yet. River keeps the
// job's metadata with its snooze, so whichever process takes the job next
// records the message instead of handing it over again.
const acceptedKey = "accepted"

// keptAcceptance is an acceptance as a send job keeps it. The job is not
// sealed and outlives an erasure a while, so it keeps no names or
// addresses: of the attachments, only what the content gateway made of
// the email's own, one for one (a download's digest and size, and the
// server's type where it was taken).
type keptAcceptance struct {
	MessageID   string           `json:"message_id"`
	At          time.Time        `json:"at"`
	Attachments []keptAttachment `json:"attachments,omitempty"`
}

type keptAttachment struct {
	Digest      string `json:"digest"`
	SizeBytes   int64  `json:"size_bytes"`
	ContentType string `json:"content_type,omitempty"` // when it is not the email's own
}

// keepAccepted keeps sent with the send job working the email st, for
// its next try. Outside a send job there is nothing to keep it with.
func keepAccepted(ctx context.Context, st email.State, sent acceptedSend) {
	own := st.Attachments()
	k := keptAcceptance{MessageID: sent.msgID, At: sent.at}
	for i, a := range sent.atts {
		ka := keptAttachment{Digest: a.Digest, SizeBytes: a.SizeBytes}
		if i >= len(own) || a.ContentType != own[i].ContentType {
			ka.ContentType = a.ContentType
		}
		k.Attachments = append(k.Attachments, ka)
	}
	_ = river.MetadataSet(ctx, acceptedKey, k)
}

// acceptedEarlier reads back what keepAccepted kept in a job's metadata.
func acceptedEarlier(metadata []byte) (keptAcceptance, bool) {
	var m struct {
		Accepted *keptAcceptance `json:"accepted"`
	}
	if json.Unmarshal(metadata, &m) != nil || m.Accepted == nil {
		return keptAcceptance{}, false
	}
	return *m.Accepted, true
}

// send is the acceptance k again, its attachments the email st's own as
// the content gateway passed them.
func (k keptAcceptance) send(st email.State) acceptedSend {
	own := st.Attachments()
	atts := make([]email.Attachment, len(k.Attachments))
	for i, ka := range k.Attachments {
		if i < len(own) {
			atts[i] = own[i]
		}
		atts[i].Digest, atts[i].SizeBytes = ka.Digest, ka.SizeBytes
		if ka.ContentType != "" {
			atts[i].ContentType = ka.ContentType
		}
	}
	return acceptedSend{msgID: k.MessageID, at: k.At, atts: atts}
}

// recordAccepted records the message the provider accepted for the
// email on an earlier try of its job (k): the message has left, so
// nothing is checked or sent again.
func (p *Pipeline) recordAccepted(ctx context.Context, id string, k keptAcceptance, meta commands.Meta) error {
	st, ver, err := p.Commands.EmailAt(ctx, id)
	if err != nil {
		return Transient(err)
	}
	if !st.Exists() || st.Sent != nil || st.Failed != nil || st.Erased != nil || st.Queued.Erased {
		return nil // recorded meanwhile, or erased
	}
	if err := p.recordSent(ctx, st, ver, k.send(st), meta); !errors.Is(err, datakeys.ErrErased) {
		return err
	}
	return nil
}

// smallAttachments is the weight below which an email counts against
// SendWorker.SmallMemory rather than Memory: emails with small attachments
// or none go out while large ones hold their part of the bound.
const smallAttachments = 1 << 20

// MemoryWeight is what an email counts against SendWorker's bound: the
// most its attachments may come to (attachmentBound).
func MemoryWeight(st email.State) int64 {
	return attachmentBound(attachmentsKnown(st.Attachments()))
}

// attachmentsKnown sums what is known of atts: the bytes of those in hand,
// the attachments' budget (in base64 bytes) they leave, and how many are
// downloads still to come.
func attachmentsKnown(atts []email.Attachment) (known, budget int64, toCome int) {
	budget = commands.MaxAttachmentBytes
	for _, a := range atts {
		if a.Path != "" && a.Digest == "" {
			toCome++
		} else {
			budget -= email.Base64Size(a.SizeBytes)
			known += a.SizeBytes
		}
	}
	return known, budget, toCome
}

// attachmentBound is the most an email's attachments may come to: the
// bytes known, and while downloads are still to come, all that the rest of
// the attachments' budget (in base64 bytes) allows; plus 64 KiB for the
// rest (bodies, the message).
func attachmentBound(known, budget int64, toCome int) int64 {
	n := 64<<10 + known
	if toCome > 0 && budget > 0 {
		n += budget / 4 * 3
	}
	return n
}

// overCapWait is how long a job of an account that has its share in flight
// waits before it is fetched again: long enough that such jobs cost little
// (each return is a fetch and an update), spread so they do not return
// together. Other accounts' jobs take the freed slots meanwhile.
func overCapWait() time.Duration {
	return time.Duration(250+rand.IntN(250)) * time.Millisecond
}

// outcome maps the pipeline's answer to River's: transient failures and
// ones caused by shutdown snooze (never counted against the job, never
// discarded); others are retried a few times and then discarded.
func (w *SendWorker) outcome(ctx context.Context, job *river.Job[SendArgs], err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return river.JobSnooze(0) // stopping: the next worker takes it at once
	case provider.IsThrottled(err):
		d := throttleWait(err, retried(ctx, job.Metadata))
		if w.Log != nil {
			// One line per window for every email the provider holds back.
			w.Log.WarnContext(logs.Many(ctx), "provider asked to slow down; email send will be retried", "email_id", job.Args.EmailID,
				"request_id", job.Args.CorrelationID, "err", logs.Redacted(err), "retry_in", d)
		}
		return river.JobSnooze(d)
	case IsTransient(err):
		n := retried(ctx, job.Metadata)
		d := w.Retry.Delay(n)
		if w.Log != nil && n > 1 {
			lctx, msg := logs.Many(ctx), "email send will be retried"
			switch pt := (*providerTrouble)(nil); {
			case errors.As(err, &pt):
				msg = "provider did not take the email for now; send will be retried"
			case errors.Is(err, blob.ErrNotFound), errors.Is(err, blob.ErrCorrupt),
				errors.Is(err, datakeys.ErrNoKey), errors.Is(err, datakeys.ErrCannotOpen):
				// A cause of the email's own (its stored content, or the key
				// that seals it) stays a line of its own.
				lctx = ctx
			}
			// Otherwise one line per window for every email held back by
			// the same trouble: the provider, the blob store, the database.
			w.Log.WarnContext(lctx, msg, "email_id", job.Args.EmailID, "request_id", job.Args.CorrelationID,
				"err", logs.Redacted(err), "retry_in", d)
		}
		return river.JobSnooze(d)
	}
	if w.Log != nil {
		w.Log.Error("email send failed", "email_id", job.Args.EmailID, "request_id", job.Args.CorrelationID,
			"attempt", job.Attempt, "err", logs.Redacted(err))
	}
	return err
}

// retried counts a send's try that failed for now (transient or throttled)
// in its job's metadata and answers which try it was, from 1. River's own
// snooze count would also count the waits for an account's slot or for
// memory, and stretch the backoff of an email that merely waited its turn.
func retried(ctx context.Context, metadata []byte) int {
	var m struct {
		Tries int `json:"send_tries"`
	}
	_ = json.Unmarshal(metadata, &m)
	m.Tries++
	_ = river.MetadataSet(ctx, "send_tries", m.Tries)
	return m.Tries
}

// AccountSlots caps the emails of one account being prepared or sent at
// once in this process, so one account's slow attachments or large burst
// cannot take every worker.
type AccountSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewAccountSlots allows max emails per account at once (0: no cap).
func NewAccountSlots(max int) *AccountSlots {
	return &AccountSlots{max: max, n: map[string]int{}}
}

// Acquire takes a slot of account, or reports false when it has none left.
// A nil AccountSlots has no cap.
func (s *AccountSlots) Acquire(account string) bool {
	if s == nil || s.max <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[account] >= s.max {
		return false
	}
	s.n[account]++
	return true
}

// Release gives back a slot Acquire took.
func (s *AccountSlots) Release(account string) {
	if s == nil || s.max <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[account]--; s.n[account] <= 0 {
		delete(s.n, account)
	}
}

// throttleBackoff paces the retries of a throttled send: about a second
// at first, so a provider's brief push-back costs little, doubling to a
// minute for an answer that lasts (a recipient's full mailbox answers 452
// on every try).
var throttleBackoff = jobs.Backoff{Min: time.Second, Max: time.Minute}

// throttleWait is how long a throttled send waits before its try number
// try: the provider's word, or throttleBackoff's, spread so throttled sends
// do not return together.
func throttleWait(err error, try int) time.Duration {
	var t *provider.ThrottledError
	if errors.As(err, &t) && t.RetryAfter > 0 {
		return t.RetryAfter
	}
	return throttleBackoff.Delay(try)
}
