package processmanagers

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/outcomes"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
	whsig "github.com/mailroom/mailroom/webhook"
)

// WebhookQueue is the River queue of webhook fan-out and attempts.
const WebhookQueue = jobs.WebhookQueue

// WebhookReaderName is the process manager that turns the log into webhook
// jobs; it takes over the checkpoints of the fan-out shards it replaced.
const (
	WebhookReaderName       = "webhooks"
	WebhookShardCheckpoints = "webhook-fanout-%-of-%"
)

// Webhooks delivers email events to endpoints with River jobs that any
// worker process claims. Each email event an endpoint may hear of becomes a
// fan-out job (see Prepare), which records one delivery per endpoint of the
// account subscribing to its type and queues each delivery's first
// attempt; a failed attempt queues the next at the time the delivery's
// stream decided. Attempts are bounded per process (the queue's workers),
// per account and per endpoint, so one account's slow receivers hold up
// only its own deliveries. A paused endpoint's or a suspended account's
// deliveries wait unattempted; resuming or reinstating queues them again.
// A low-rate sweep expires deliveries held too long and queues any overdue
// delivery a lost job left behind.
type Webhooks struct {
	Pool     *pgxpool.Pool
	Commands *commands.Service
	Box      *secretbox.Box
	Client   *http.Client // the egress client, with the 10 s receiver time-out
	// Endpoints lists the account's endpoints that subscribe to eventType,
	// active or not, created by at: an endpoint hears of events Mailroom
	// learns of after it is made, however late the log is read.
	Endpoints   func(ctx context.Context, accountID, eventType string, at time.Time) ([]Target, error)
	Settle      commands.Settle
	Schedule    []time.Duration
	Now         func() time.Time
	Log         *slog.Logger
	PerAccount  int // attempts of one account in flight in this process
	PerEndpoint int // of one endpoint: below PerAccount, so a slow endpoint leaves room for the account's others
	UserAgent   string
	Outcomes    *outcomes.Recorder // may be nil
	Sweep       time.Duration      // between sweeps of the read model

	planMu sync.Mutex
	queued map[string]queuedEmail // the emails Plan saw queued, by id
	order  []string               // their ids, oldest first from next
	next   int
	listed *endpointSet // what Prepare read for the batch; nil: nothing

	mu        sync.Mutex
	accounts  map[string]*share       // attempts in flight by account
	endpoints map[string]*share       // and by endpoint
	waiting   map[string]int          // attempts waiting for a place, by account
	freed     chan struct{}           // closed when a place is freed
	lastSweep time.Time               // of held deliveries, by Now
	sweptTo   readapi.OverdueDelivery // where the last sweep of overdue deliveries stopped
}

// Target is an endpoint an event goes to.
type Target struct {
	ID       string
	Disabled bool // disabled after consecutive failures (not paused)
}

var (
	fanoutMeta   = commands.Meta{Actor: "system:webhook-fanout"}
	dispatchMeta = commands.Meta{Actor: "system:webhook-dispatcher"}
)

// whilePending makes a job unique until it has run: the same job queued
// again meanwhile (a redelivered event, a sweep) is one job.
var whilePending = &river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled}}

// FanoutArgs is an email event to fan out to the account's endpoints.
type FanoutArgs struct {
	EventID string    `json:"event_id" river:"unique"`
	EmailID string    `json:"email_id"`
	Type    string    `json:"type"` // the webhook's, e.g. email.delivered
	At      time.Time `json:"at"`   // when it happened: the payload's created_at
	// RecordedAt is when Mailroom recorded it, later than At for provider
	// feedback: an endpoint created in between hears of it too.
	RecordedAt time.Time `json:"recorded_at,omitzero"`
	Extra      *Details  `json:"extra,omitempty"`
	// CorrelationID is the event's: its deliveries keep the email's story.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Revision is where the event is in the email's stream, so that it is
	// read alone (Commands.EmailEvent); zero in jobs queued before it.
	Revision uint64 `json:"revision,omitempty"`
}

// heardAt is when Mailroom learned of the event: endpoints created by then
// hear of it. (Jobs queued before RecordedAt existed carry At alone.)
func (a FanoutArgs) heardAt() time.Time {
	if a.RecordedAt.After(a.At) {
		return a.RecordedAt
	}
	return a.At
}

// Details are the envelope data's fields that only some types carry.
type Details struct {
	BounceType    string `json:"bounce_type,omitempty"`
	BounceSubtype string `json:"bounce_subtype,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

func (FanoutArgs) Kind() string { return "webhook_fanout" }
func (FanoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: WebhookQueue, UniqueOpts: *whilePending}
}

// AttemptArgs is attempt number Attempt of a delivery. The job holds
// nothing of the payload: the attempt reads it from the stream, where it
// reads erased once the email is, so a job queued before an erasure never
// sends the data after it. NotBefore, by the domain's clock, is when a
// retry is due.
type AttemptArgs struct {
	DeliveryID string    `json:"delivery_id" river:"unique"`
	Attempt    int       `json:"attempt" river:"unique"`
	AccountID  string    `json:"account_id"`
	EndpointID string    `json:"endpoint_id"`
	NotBefore  time.Time `json:"not_before,omitzero"`
	// Listed is the position of the delivery's recording: its first
	// attempt waits for the read model to show it, so a receiver that
	// hears of a delivery finds it listed.
	Listed *eventstore.Position `json:"listed,omitempty"`
	// Cause is the email event the delivery carries, and CorrelationID
	// its story; an attempt queued by a release or a sweep has neither.
	Cause         string `json:"cause,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// meta is the metadata of what the attempt records.
func (a AttemptArgs) meta() commands.Meta {
	if a.Cause == "" {
		return commands.Started(dispatchMeta.Actor)
	}
	return dispatchMeta.Following(a.Cause, a.CorrelationID)
}

func (AttemptArgs) Kind() string { return "webhook_attempt" }

// InsertOpts queues a retry behind every first attempt and fan-out (see
// retryPriority).
func (a AttemptArgs) InsertOpts() river.InsertOpts {
	priority := 1
	if a.Attempt > 1 {
		priority = retryPriority
	}
	return river.InsertOpts{Queue: WebhookQueue, UniqueOpts: *whilePending, Priority: priority}
}

// retryPriority is River's priority (1 is claimed first) of a retry. A
// receiver that refuses makes seven attempts of each event, whose retries
// come due in bursts; when the workers have more to do than they can, the
// retries wait behind every fresh event, so one account's broken receivers
// do not delay another's webhooks. With room to spare, every attempt is
// made when it is due, whatever its priority.
const retryPriority = 2

// ReleaseArgs queues the attempts of deliveries that waited for an endpoint
// to be resumed (EndpointID) or an account to be reinstated (AccountID),
// once the read model shows the event at Position.
type ReleaseArgs struct {
	EndpointID string              `json:"endpoint_id,omitempty"`
	AccountID  string              `json:"account_id,omitempty"`
	Position   eventstore.Position `json:"position"`
}

func (ReleaseArgs) Kind() string { return "webhook_release" }

// DropArgs ends the deliveries of an email whose erasure is recorded at
// Position and that are still pending on their streams, held ones
// included, which no attempt would reach.
type DropArgs struct {
	EmailID  string              `json:"email_id" river:"unique"`
	Position eventstore.Position `json:"position"`
	// Erasure is the EmailErased event, and CorrelationID its story.
	Erasure       string `json:"erasure,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

func (DropArgs) Kind() string                    { return "webhook_drop" }
func (DropArgs) InsertOpts() river.InsertOpts    { return river.InsertOpts{Queue: WebhookQueue} }
func (ReleaseArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: WebhookQueue} }

// prepareWait bounds Prepare's wait for the webhooks read model.
const prepareWait = 250 * time.Millisecond

// rememberedEmails bounds the queued emails Plan remembers; an email it
// forgot, or never saw (before a restart), gets its fan-out job.
const rememberedEmails = 100_000

type queuedEmail struct {
	account string
	at      eventstore.Position // of its email.Queued
}

// endpointSet is the read model as Prepare found it: how far it had read
// the log, and which event types each account has an endpoint for.
type endpointSet struct {
	projected eventstore.Position
	asked     map[string]bool // the accounts whose endpoints were read
	types     map[accountType]bool
}

type accountType struct{ account, typ string }

// fanoutTypes are the email event types that become webhooks.
var fanoutTypes = func() map[string]bool {
	m := map[string]bool{}
	for _, e := range email.Events() {
		if _, _, _, ok := webhookEvent(e); ok {
			m[e.EventType()] = true
		}
	}
	return m
}()

// Prepare is the reader's hook before each batch: in one query it reads how
// far the webhooks read model has got and which (account, event type)
// pairs of the batch's accounts have an endpoint, whatever its state (a paused or disabled
// endpoint's deliveries are recorded too). With it, Plan makes no fan-out
// job for an event of an email it saw queued at or below that position
// whose account has no endpoint for the type. That is what the fan-out
// would find: an endpoint created before the email was queued is in the
// read model by then, and one created while the email is under way was
// never promised the email's events (the fan-out waits for the queued
// position only). A batch planned again after a crash is read afresh: at
// worst it makes a job whose fan-out finds no endpoint.
func (w *Webhooks) Prepare(ctx context.Context, batch []eventstore.RecordedEvent) error {
	w.planMu.Lock()
	w.listed = nil
	w.planMu.Unlock()
	// Only the accounts of emails Plan remembers from earlier batches can be
	// passed over.
	seen := map[string]bool{}
	var asked []string
	var latest eventstore.Position // the newest queued email asked about
	ask := func(account string, queued eventstore.Position) {
		if latest.Less(queued) {
			latest = queued
		}
		if !seen[account] {
			seen[account] = true
			asked = append(asked, account)
		}
	}
	for _, ev := range batch {
		emailID, isEmail := email.IDFromStream(ev.StreamID)
		if !isEmail {
			continue
		}
		// An email queued in this very batch is not asked about: the
		// read model seldom has it yet, and the batch would wait for it.
		if !fanoutTypes[ev.Type] {
			continue
		}
		w.planMu.Lock()
		q, ok := w.queued[emailID]
		w.planMu.Unlock()
		if ok {
			ask(q.account, q.at)
		}
	}
	if len(asked) == 0 {
		return nil
	}
	// The fan-out would wait for the read model to reach the email's
	// queue; so does the batch, which is seldom behind it, but not for
	// long: the reader plans for every account, and a read model that is
	// far behind only means the batch's events get their jobs.
	if w.Settle != nil {
		sctx, cancel := context.WithTimeout(ctx, prepareWait)
		_ = w.Settle(sctx, latest, projections.WebhooksName)
		cancel()
	}
	subs, err := readapi.SubscribedTypes(ctx, w.Pool, string(projections.WebhooksName), asked)
	if err != nil {
		return fmt.Errorf("webhook endpoints: %w", err)
	}
	if !subs.Made {
		return nil // the read model is not made yet: every event gets its fan-out
	}
	accounts, types := subs.Accounts, subs.Types
	set := &endpointSet{projected: eventstore.Position{Commit: subs.Commit, Prepare: subs.Prepare},
		asked: seen, types: make(map[accountType]bool, len(accounts))}
	for i := range accounts {
		set.types[accountType{accounts[i], types[i]}] = true
	}
	w.planMu.Lock()
	w.listed = set
	w.planMu.Unlock()
	return nil
}

// remember notes an email's account and queued position, forgetting the
// oldest beyond rememberedEmails.
func (w *Webhooks) remember(emailID, accountID string, at eventstore.Position) {
	w.planMu.Lock()
	defer w.planMu.Unlock()
	if w.queued == nil {
		w.queued = map[string]queuedEmail{}
	}
	if _, ok := w.queued[emailID]; ok {
		return // planned again
	}
	if len(w.order) < rememberedEmails {
		w.order = append(w.order, emailID)
	} else {
		delete(w.queued, w.order[w.next])
		w.order[w.next] = emailID
		w.next = (w.next + 1) % rememberedEmails
	}
	w.queued[emailID] = queuedEmail{account: accountID, at: at}
}

// unheard reports that no endpoint can hear of the email's event of type
// typ (see Prepare). Only an account Prepare asked about can be judged: an
// email queued in the batch itself is remembered by Plan after Prepare
// read the endpoints, and its account's may not be among them.
func (w *Webhooks) unheard(emailID, typ string) bool {
	w.planMu.Lock()
	defer w.planMu.Unlock()
	q, ok := w.queued[emailID]
	return ok && w.listed != nil && w.listed.asked[q.account] && !w.listed.projected.Less(q.at) &&
		!w.listed.types[accountType{q.account, typ}]
}

// Plan turns an event of the log into webhook jobs: an email event an
// endpoint may hear of into its fan-out, a delivery recorded by anything
// but the fan-out (a test event) into its first attempt, a resume or
// reinstatement into a release. It remembers queued emails for Prepare.
func (w *Webhooks) Plan(ctx context.Context, ev eventstore.RecordedEvent) ([]river.InsertManyParams, error) {
	emailID, isEmail := email.IDFromStream(ev.StreamID)
	_, isDelivery := delivery.IDFromStream(ev.StreamID)
	switch {
	case isEmail:
	case isDelivery:
		if ev.Type != (&delivery.Created{}).EventType() || ev.Metadata.Actor == fanoutMeta.Actor {
			return nil, nil
		}
	case ev.Type == (&webhook.Resumed{}).EventType(), ev.Type == (&account.Reinstated{}).EventType():
	default:
		return nil, nil
	}
	e, err := decodeToReact(ev)
	if errors.Is(err, errNewerRelease) {
		return nil, err // the reader holds here until the newer release reads
	}
	if err != nil {
		return nil, jobs.Malformed(err) // undecodable: no retry helps
	}
	var args river.JobArgs
	switch e := e.(type) {
	case *delivery.Created:
		// Without the delivery: a redelivered event must find the attempt
		// made, on the stream.
		cause := ev.Metadata.CausationID // the email event, when the fan-out recorded it
		if cause == "" {
			cause = ev.ID.String()
		}
		args = AttemptArgs{DeliveryID: e.DeliveryID, Attempt: 1, AccountID: e.AccountID, EndpointID: e.EndpointID,
			Cause: cause, CorrelationID: ev.Metadata.CorrelationID}
	case *webhook.Resumed:
		args = ReleaseArgs{EndpointID: e.EndpointID, Position: ev.Position}
	case *account.Reinstated:
		args = ReleaseArgs{AccountID: e.AccountID, Position: ev.Position}
	case *email.Queued:
		w.remember(emailID, e.AccountID, ev.Position)
		return nil, nil
	case *email.Erased:
		args = DropArgs{EmailID: emailID, Position: ev.Position, Erasure: ev.ID.String(), CorrelationID: ev.Metadata.CorrelationID}
	default:
		typ, at, extra, ok := webhookEvent(e)
		if !ok || email.DataErased(e) {
			return nil, nil
		}
		if w.unheard(emailID, typ) {
			return nil, nil
		}
		args = FanoutArgs{EventID: ev.ID.String(), EmailID: emailID, Type: typ, At: at, RecordedAt: ev.RecordedAt,
			Extra: extra, CorrelationID: ev.Metadata.CorrelationID, Revision: ev.StreamRevision}
	}
	return []river.InsertManyParams{{Args: args}}, nil
}

// Register adds the webhook workers to a River client's workers.
func (w *Webhooks) Register(ws *river.Workers) {
	river.AddWorker(ws, &fanoutWorker{w: w})
	river.AddWorker(ws, &attemptWorker{w: w})
	river.AddWorker(ws, &releaseWorker{w: w})
	river.AddWorker(ws, &dropWorker{w: w})
}

// webhookEvent maps a timeline event to its webhook type, time and the
// fields it adds to the envelope's data.
func webhookEvent(e domain.Event) (typ string, at time.Time, extra *Details, ok bool) {
	switch e := e.(type) {
	case *email.Sent:
		return whsig.TypeEmailSent, e.SentAt, nil, true
	case *email.Delivered:
		return whsig.TypeEmailDelivered, e.OccurredAt, nil, true
	case *email.Bounced:
		return whsig.TypeEmailBounced, e.OccurredAt, &Details{BounceType: e.BounceType, BounceSubtype: e.BounceSubtype}, true
	case *email.Complained:
		return whsig.TypeEmailComplained, e.OccurredAt, nil, true
	case *email.Opened:
		return whsig.TypeEmailOpened, e.OccurredAt, nil, true
	case *email.Clicked:
		return whsig.TypeEmailClicked, e.OccurredAt, nil, true // its link is read from the stream
	case *email.Failed:
		return whsig.TypeEmailFailed, e.FailedAt, &Details{Reason: e.Reason}, true
	}
	return "", time.Time{}, nil, false
}

type fanoutWorker struct {
	river.WorkerDefaults[FanoutArgs]
	w *Webhooks
}

// Work records the event's deliveries with one append and queues the
// first attempt of each.
func (f *fanoutWorker) Work(ctx context.Context, job *river.Job[FanoutArgs]) error {
	w, a := f.w, job.Args
	st, queuedAt, err := w.Commands.EmailSince(ctx, a.EmailID)
	if err != nil || !st.Exists() {
		return err
	}
	q := st.Queued
	if st.Erased != nil || q.Erased {
		return nil // nothing of an erased email is sent
	}
	// Endpoints created before the email was sent must be seen. (Waiting
	// for this event's own position would hold every event up for a
	// projection cycle; an endpoint created while the email is under way
	// gets its later events only.) A read model still behind that is no
	// answer: the event waits for it rather than reach nobody.
	if err := w.Settle(ctx, queuedAt, projections.WebhooksName); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return river.JobSnooze(time.Second)
	}
	endpoints, err := w.Endpoints(ctx, q.AccountID, a.Type, a.heardAt())
	if err != nil || len(endpoints) == 0 {
		return err
	}
	tags := q.Tags
	if tags == nil {
		tags = map[string]string{}
	}
	data := whsig.EventData{EmailID: q.EmailID, From: q.From, To: strings.Join(q.To, ", "), Subject: q.Subject, Tags: tags}
	if x := a.Extra; x != nil {
		data.BounceType, data.BounceSubtype, data.Reason = x.BounceType, x.BounceSubtype, x.Reason
	}
	switch a.Type {
	case whsig.TypeEmailClicked, whsig.TypeEmailDelivered, whsig.TypeEmailBounced, whsig.TypeEmailComplained:
		// A link or an address is personal: it stays sealed in the log,
		// never in a job.
		e, err := w.Commands.EmailEvent(ctx, a.EmailID, a.EventID, a.Revision)
		if err != nil {
			return err
		}
		switch e := e.(type) {
		case *email.Clicked:
			data.Link = e.Link
		case *email.Delivered:
			data.Recipients = e.Recipients
		case *email.Bounced:
			data.Recipients = e.Recipients
		case *email.Complained:
			data.Recipients = e.Recipients
		}
	}
	payload, err := json.Marshal(whsig.Event{Type: a.Type, CreatedAt: a.At, Data: data})
	if err != nil {
		return err
	}
	ds := make([]commands.NewDelivery, len(endpoints))
	for i, ep := range endpoints {
		// One delivery per (event, endpoint), whatever the redeliveries.
		id := uuid.NewHash(sha1.New(), deliveryNamespace, []byte(a.EventID+"/"+ep.ID), 5).String()
		ds[i] = commands.NewDelivery{Created: delivery.Created{DeliveryID: id, EndpointID: ep.ID, AccountID: q.AccountID,
			EmailID: q.EmailID, Type: a.Type, Payload: string(payload), CreatedAt: a.At}, Skipped: ep.Disabled}
	}
	meta := fanoutMeta.Following(a.EventID, a.CorrelationID)
	if a.CorrelationID == "" { // queued by a release that kept no stories
		meta = w.Commands.EmailStory(ctx, a.EmailID, a.EventID, fanoutMeta)
		a.CorrelationID = meta.RequestID // and so do the attempts
	}
	fresh, last, err := w.Commands.CreateDeliveries(ctx, ds, meta)
	if err != nil {
		return err
	}
	// The first attempts wait for the read model to list the deliveries,
	// then read their endpoints.
	var jobs []river.InsertManyParams
	var only *commands.NewDelivery
	for i, d := range ds {
		if d.Skipped {
			continue
		}
		args := AttemptArgs{DeliveryID: d.DeliveryID, Attempt: 1, AccountID: d.AccountID, EndpointID: d.EndpointID, Listed: &last,
			Cause: a.EventID, CorrelationID: a.CorrelationID}
		jobs = append(jobs, river.InsertManyParams{Args: args})
		if fresh[i] {
			only = &ds[i]
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	// The one delivery of an event, just recorded by this first run, is
	// attempted here: a job of its own would cost an insert, a claim and
	// a completion for the same work. A delivery that must wait (its
	// endpoint's or account's share is taken, or a retry is due later)
	// goes to its own job after all, as does anything a rerun finds.
	if len(jobs) == 1 && only != nil && job.Attempt == 1 {
		st, expected := commands.Created(only.Created)
		err := w.attempt(ctx, jobs[0].Args.(AttemptArgs), st, expected, false, -1)
		var wait *river.JobSnoozeError
		if !errors.As(err, &wait) {
			return err
		}
	}
	_, err = river.ClientFromContext[pgx.Tx](ctx).InsertMany(ctx, jobs)
	return err
}

var deliveryNamespace = uuid.MustParse("0c9b8f0e-4b8a-4d8e-9c55-2f6a0e3d7b21")

type attemptWorker struct {
	river.WorkerDefaults[AttemptArgs]
	w *Webhooks
}

// Timeout covers the receiver's 10 s and recording the outcome.
func (*attemptWorker) Timeout(*river.Job[AttemptArgs]) time.Duration { return time.Minute }

// busy is how long an attempt that found no place within its shares waits
// in the queue before asking again, instead of holding one of the
// process's slots: 200–600 ms at first, doubling with each time the job
// found none (waits), up to about the time the full share's places take
// to free (pace) but at most busyMax, ±50 %. A slow receiver's backlog
// then asks every few seconds per job instead of several times a second,
// while a fast one's, whose places free within milliseconds, never waits
// longer than 600 ms.
func busy(waits int, pace time.Duration) time.Duration {
	d := busyMin << min(waits, 8)
	d = min(d, max(busyMin, min(pace, busyMax)))
	return d/2 + rand.N(d)
}

// busyMax keeps busy, jitter included, under River's scheduler interval
// (5 s): a longer snooze would wait for the scheduler to make the job
// available again.
const busyMin, busyMax = 400 * time.Millisecond, 3 * time.Second

// shareWait is how long an attempt waits in the process for a place within
// its shares: a fast receiver frees one within milliseconds, so its
// account's backlog flows without a round trip through the queue; a slow
// one does not, and its attempts go back to the queue.
const shareWait = 250 * time.Millisecond

// share is an account's or an endpoint's places in this process.
type share struct {
	n     int           // places taken
	freed time.Time     // when one was last freed (or the first taken)
	took  time.Duration // how long an attempt holds its place, averaged; 0: none measured
}

// pace is how long s's places take to free: the usual time of an attempt,
// or longer while none has freed for longer.
func (s *share) pace(now time.Time) time.Duration {
	if s == nil {
		return 0
	}
	return max(s.took, now.Sub(s.freed))
}

// over reports whether the account's or the endpoint's share is full, and
// how long the full one's places take to free. w.mu is held.
func (w *Webhooks) over(accountID, endpointID string) (over bool, pace time.Duration) {
	now := time.Now()
	if a := w.accounts[accountID]; a != nil && a.n >= w.PerAccount {
		over, pace = true, a.pace(now)
	}
	if e := w.endpoints[endpointID]; e != nil && e.n >= w.PerEndpoint {
		over, pace = true, max(pace, e.pace(now))
	}
	return over, pace
}

// slow reports that an attempt's share is full and its places take longer
// than shareWait to free: its job had better take its place before reading
// anything, since it most likely finds none.
func (w *Webhooks) slow(accountID, endpointID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	over, pace := w.over(accountID, endpointID)
	return over && pace > shareWait
}

// take claims a place for an attempt within its account's and endpoint's
// shares, waiting up to shareWait. At most an account's share of its
// attempts wait at once, so one account never holds more than twice its
// share of the process's slots. When it gets none, pace is how long the
// full share's places take to free (see busy).
func (w *Webhooks) take(ctx context.Context, accountID, endpointID string) (ok bool, pace time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.accounts == nil {
		w.accounts, w.endpoints, w.waiting = map[string]*share{}, map[string]*share{}, map[string]int{}
		w.freed = make(chan struct{})
	}
	var timeout <-chan time.Time
	for {
		over, p := w.over(accountID, endpointID)
		if !over {
			break
		}
		if w.waiting[accountID] >= w.PerAccount {
			return false, p
		}
		if timeout == nil {
			t := time.NewTimer(shareWait)
			defer t.Stop()
			timeout = t.C
		}
		freed := w.freed
		w.waiting[accountID]++
		w.mu.Unlock()
		expired := false
		select {
		case <-freed:
		case <-timeout:
			expired = true
		case <-ctx.Done():
			expired = true
		}
		w.mu.Lock()
		if w.waiting[accountID]--; w.waiting[accountID] <= 0 {
			delete(w.waiting, accountID)
		}
		if expired {
			_, p := w.over(accountID, endpointID)
			return false, p
		}
	}
	now := time.Now()
	hold(w.accounts, accountID, now)
	hold(w.endpoints, endpointID, now)
	return true, 0
}

// release frees a place take claimed; took is how long the attempt spent
// on the receiver (0: it made none).
func (w *Webhooks) release(accountID, endpointID string, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	free(w.accounts, accountID, now, took)
	free(w.endpoints, endpointID, now, took)
	close(w.freed) // wakes the waiters
	w.freed = make(chan struct{})
}

// hold counts a place taken in m[id].
func hold(m map[string]*share, id string, now time.Time) {
	if m[id] == nil {
		m[id] = &share{freed: now}
	}
	m[id].n++
}

// free counts a place of m[id] freed after took on the receiver (0: none).
func free(m map[string]*share, id string, now time.Time, took time.Duration) {
	s := m[id]
	if s == nil {
		return // never taken
	}
	if s.n--; s.n <= 0 {
		delete(m, id)
		return
	}
	s.freed = now
	switch {
	case took <= 0:
	case s.took == 0:
		s.took = took
	default:
		s.took = (3*s.took + took) / 4
	}
}

// Work makes the attempt if it is still due and its endpoint may receive
// it, records it, and queues the next when it failed with retries left.
// Behind a slow receiver whose share is full, the attempt takes its place
// before reading anything, so one over its share costs a fetch and a
// snooze, nothing more; its reads then hold the place for a few
// milliseconds of the receiver's hundreds. Otherwise it reads first, and
// its place holds only the receiver's time.
func (aw *attemptWorker) Work(ctx context.Context, job *river.Job[AttemptArgs]) error {
	w, a := aw.w, job.Args
	if wait := a.NotBefore.Sub(w.Now()); wait > 0 {
		return river.JobSnooze(wait)
	}
	placed := false
	if w.slow(a.AccountID, a.EndpointID) {
		ok, pace := w.take(ctx, a.AccountID, a.EndpointID)
		if !ok {
			return noPlace(ctx, shareWaits(job.Metadata), pace)
		}
		placed = true
	}
	defer func() {
		if placed {
			w.release(a.AccountID, a.EndpointID, 0)
		}
	}()
	st, expected, err := w.Commands.Delivery(ctx, a.DeliveryID)
	if err != nil {
		return err
	}
	if a.Cause == "" && st.Created != nil {
		// Queued by a release or a sweep: the attempt still belongs to
		// the story of the email event its delivery carries.
		story, err := w.Commands.StoryOf(ctx, delivery.Stream(a.DeliveryID))
		if err != nil {
			return err
		}
		a.Cause, a.CorrelationID = story.CausationID, story.CorrelationID
	}
	held := placed
	placed = false // attempt frees it
	return w.attempt(ctx, a, st, expected, held, shareWaits(job.Metadata))
}

// shareWaits is how often the attempt's job found no place within its
// shares so far. River's own snooze count would also count its waits for
// its retry to be due.
func shareWaits(metadata []byte) int {
	var m struct {
		Waits int `json:"share_waits"`
	}
	_ = json.Unmarshal(metadata, &m)
	return m.Waits
}

// noPlace snoozes an attempt that found no place within its shares for
// busy, and counts it in its job's metadata; waits < 0: the attempt has no
// job of its own yet (the fan-out's first attempt).
func noPlace(ctx context.Context, waits int, pace time.Duration) error {
	if waits >= 0 {
		_ = river.MetadataSet(ctx, "share_waits", waits+1)
	}
	return river.JobSnooze(busy(max(waits, 0), pace))
}

// attempt is a's work on the delivery as its stream stands (st, read at
// expected). A river.JobSnoozeError asks for the attempt again later.
// placed: the caller took a's place (take), which attempt frees; waits:
// how often its job found no place so far (shareWaits; -1 without a job).
func (w *Webhooks) attempt(ctx context.Context, a AttemptArgs, st delivery.State, expected eventstore.ExpectedVersion, placed bool, waits int) error {
	defer func() {
		if placed {
			w.release(a.AccountID, a.EndpointID, 0)
		}
	}()
	if st.Created == nil || st.Status != delivery.Pending || st.Attempts >= a.Attempt+1 {
		return nil // ended, or its next attempt is under way
	}
	if st.Created.Erased {
		// Its email was erased: dropped, never sent, and no failure of
		// the endpoint's.
		return w.Commands.DropDelivery(ctx, a.DeliveryID, false, a.meta())
	}
	if a.Listed != nil {
		// A receiver that hears of a delivery finds it listed. Waited for
		// before the endpoint is read: read after, it is seldom to be read
		// again before the post.
		_ = w.Settle(ctx, *a.Listed, projections.WebhooksName)
	}
	ep, held, err := w.endpointFor(ctx, a, st)
	if held || err != nil {
		return err
	}
	read := time.Now()
	if st.Attempts == a.Attempt {
		// Recorded by an earlier run that did not get to queue the next.
		return w.queueNext(ctx, a, st.NextAt)
	}
	if st.Attempts+1 != a.Attempt {
		return nil
	}
	if now := w.Now(); !st.Due(now) {
		return river.JobSnooze(st.NextAt.Sub(now))
	}
	// The shares bound the time spent on receivers; recording is the
	// database's and holds none.
	if !placed {
		ok, pace := w.take(ctx, a.AccountID, a.EndpointID)
		if !ok {
			return noPlace(ctx, waits, pace)
		}
		placed = true // the defer frees it should the post panic
	}
	// The waits above may have outlasted a change of the endpoint that has
	// since been answered (deleted, paused, its secret rotated, its URL
	// moved, its account suspended): the attempt goes by the endpoint as
	// it is now.
	if time.Since(read) > rereadAfter {
		if ep, held, err = w.endpointFor(ctx, a, st); held || err != nil {
			return err
		}
	}
	start := time.Now()
	o, err := w.post(ctx, st.Created, ep.URL, ep.SealedSecret)
	w.release(a.AccountID, a.EndpointID, time.Since(start))
	placed = false
	if err != nil {
		return err
	}
	w.Outcomes.Attempt(o.Succeeded())
	final, disabled, err := w.Commands.RecordAttempt(ctx, st, expected, o, w.Schedule, rand.Float64()*2-1, ep.Clean, a.meta())
	if err != nil {
		return err
	}
	if w.Log != nil && final.Status == delivery.Failed {
		w.Log.Info("webhook delivery failed; no attempt left", "account_id", a.AccountID, "endpoint_id", a.EndpointID,
			"delivery_id", a.DeliveryID, "attempts", final.Attempts, "err", o.Error)
	}
	if w.Log != nil && disabled {
		w.Log.Warn("webhook endpoint disabled after consecutive failed deliveries", "account_id", a.AccountID,
			"endpoint_id", a.EndpointID, "failed_deliveries", webhook.DisableAfterExhausted)
	}
	if final.Status != delivery.Pending || final.Attempts != a.Attempt {
		return nil
	}
	return w.queueNext(ctx, a, final.NextAt)
}

// rereadAfter is how long an attempt may wait for its place before it
// reads its endpoint again: a change answered within it is no later than
// one answered while the post is under way.
const rereadAfter = 10 * time.Millisecond

// endpointFor reads the endpoint of a's delivery as it is now; held says
// the delivery is not to be attempted: the endpoint is deleted (with its
// deliveries), no longer subscribes to the event's type (the delivery is
// dropped, unattempted), or is paused, disabled or its account suspended
// (held, none of its retries spent: resuming or reinstating queues it
// again).
func (w *Webhooks) endpointFor(ctx context.Context, a AttemptArgs, st delivery.State) (ep readapi.AttemptEndpoint, held bool, err error) {
	ep, err = readapi.EndpointForAttempt(ctx, w.Pool, a.EndpointID)
	if errors.Is(err, readapi.ErrNotFound) {
		return ep, true, nil
	}
	if err != nil {
		return ep, true, err
	}
	if !st.Created.Test && !slices.Contains(ep.EventTypes, st.Created.Type) {
		return ep, true, w.Commands.DropUnsubscribedDelivery(ctx, a.DeliveryID, a.meta())
	}
	return ep, !ep.Active || ep.Suspended, nil
}

// queueNext queues the attempt after a's, due at (by the domain's clock).
func (w *Webhooks) queueNext(ctx context.Context, a AttemptArgs, at time.Time) error {
	next := AttemptArgs{DeliveryID: a.DeliveryID, Attempt: a.Attempt + 1, AccountID: a.AccountID, EndpointID: a.EndpointID, NotBefore: at,
		Cause: a.Cause, CorrelationID: a.CorrelationID}
	var opts river.InsertOpts
	if wait := at.Sub(w.Now()); wait > scheduleAfter {
		opts.ScheduledAt = time.Now().Add(wait)
	}
	_, err := river.ClientFromContext[pgx.Tx](ctx).Insert(ctx, next, &opts)
	return err
}

// scheduleAfter is the wait beyond which a retry is a scheduled job: River
// makes those available every few seconds, which a short wait would
// overshoot, so a shorter one is snoozed (to the millisecond) by the job.
const scheduleAfter = 10 * time.Second

// post makes one attempt; the error is for what stopped it being made.
func (w *Webhooks) post(ctx context.Context, c *delivery.Created, url, sealed string) (delivery.Outcome, error) {
	var o delivery.Outcome
	secret, err := w.Box.Open(sealed, commands.SecretContext(c.EndpointID))
	if err != nil {
		return o, err
	}
	body := []byte(c.Payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(c.Payload))
	if err != nil {
		return o, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", w.UserAgent)
	req.Header.Set(whsig.HeaderSignature, whsig.Sign(string(secret), body, w.Now()))
	req.Header.Set(whsig.HeaderEventType, c.Type)
	req.Header.Set(whsig.HeaderDeliveryID, c.DeliveryID)
	resp, err := w.Client.Do(req)
	if err != nil {
		o.Error = egress.Describe(err)
		return o, nil
	}
	drain(resp)
	code := resp.StatusCode
	o.ResponseStatus = &code
	o.Error = egress.DescribeStatus(code)
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		o.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), w.Now())
	}
	return o, nil
}

// maxRetryAfter bounds a receiver's Retry-After before it becomes a
// Duration, so a huge number asks for a long wait instead of wrapping round
// to a short one. The schedule's longest wait caps it further.
const maxRetryAfter = 365 * 24 * time.Hour

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

type releaseWorker struct {
	river.WorkerDefaults[ReleaseArgs]
	w *Webhooks
}

// Work queues the pending deliveries of a resumed endpoint or a reinstated
// account, once the read model shows the change.
func (rw *releaseWorker) Work(ctx context.Context, job *river.Job[ReleaseArgs]) error {
	w, a := rw.w, job.Args
	projection := projections.WebhooksName
	if a.AccountID != "" {
		projection = projections.AccountsName
	}
	if w.Settle(ctx, a.Position, projection) != nil {
		return errors.New("the read model is behind the event")
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	again := false
	// Oldest first: River starts jobs queued together in the order of
	// their ids.
	for after := (readapi.PendingDelivery{}); ; {
		list, err := readapi.PendingOf(ctx, w.Pool, a.EndpointID, a.AccountID, after, 1000)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			break
		}
		after = list[len(list)-1]
		due := make([]readapi.DueDelivery, len(list))
		for i, d := range list {
			due[i] = d.DueDelivery
		}
		running, err := insertDue(ctx, client, nextAttempts(due))
		if err != nil {
			return err
		}
		again = again || running
	}
	if looks := releaseLooksOf(job.Metadata); again && looks < releaseLooks {
		// An attempt that saw the endpoint or account still held may be
		// ending without sending: look again once it has. Attempts that
		// keep running are a busy receiver's; the sweep covers any left.
		_ = river.MetadataSet(ctx, "release_looks", looks+1)
		return river.JobSnooze(releaseAgainAfter)
	}
	return nil
}

// releaseLooksOf is how often the release's job looked again so far,
// counted in its metadata: River does not count a snooze as an attempt,
// so job.Attempt stays where it was.
func releaseLooksOf(metadata []byte) int {
	var m struct {
		Looks int `json:"release_looks"`
	}
	_ = json.Unmarshal(metadata, &m)
	return m.Looks
}

// A release looks again every releaseAgainAfter, releaseLooks times at
// most, at deliveries whose attempt was running when it queued them.
const (
	releaseAgainAfter = 500 * time.Millisecond
	releaseLooks      = 20
)

type dropWorker struct {
	river.WorkerDefaults[DropArgs]
	w *Webhooks
}

// Work drops every delivery of the erased email, once the read model lists
// the ones recorded before the erasure.
func (dw *dropWorker) Work(ctx context.Context, job *river.Job[DropArgs]) error {
	w, a := dw.w, job.Args
	if w.Settle(ctx, a.Position, projections.WebhooksName) != nil {
		return errors.New("the read model is behind the event")
	}
	ids, err := readapi.DeliveriesOfEmail(ctx, w.Pool, a.EmailID)
	if err != nil {
		return err
	}
	meta := dispatchMeta.Following(a.Erasure, a.CorrelationID)
	if a.Erasure == "" {
		meta = commands.Started(dispatchMeta.Actor)
	}
	for _, id := range ids {
		if err := w.Commands.DropDelivery(ctx, id, true, meta); err != nil {
			return err
		}
	}
	return nil
}

// nextAttempts is the job of each delivery's next attempt.
func nextAttempts(list []readapi.DueDelivery) []river.InsertManyParams {
	jobs := make([]river.InsertManyParams, len(list))
	for i, d := range list {
		jobs[i] = river.InsertManyParams{Args: AttemptArgs{DeliveryID: d.ID, AccountID: d.AccountID, EndpointID: d.EndpointID, Attempt: d.Attempts + 1}}
	}
	return jobs
}

// insertDue queues attempts that are due now. One whose job exists already
// but waits in the queue for later (a retry River scheduled before the
// delivery was held, by a clock that has since moved) is made available:
// its job snoozes again if it is not due yet. running reports that some
// attempt's job was still running: it may be one that found the delivery
// held an instant ago and is about to end without attempting, so the
// caller must queue again once it has ended.
func insertDue(ctx context.Context, client *river.Client[pgx.Tx], jobs []river.InsertManyParams) (running bool, err error) {
	res, err := client.InsertMany(ctx, jobs)
	if err != nil {
		return false, err
	}
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			continue
		}
		switch r.Job.State {
		case rivertype.JobStateScheduled:
			if _, err := client.JobRetry(ctx, r.Job.ID); err != nil {
				return false, err
			}
		case rivertype.JobStateRunning:
			running = true
		}
	}
	return running, nil
}

// RunSweep sweeps the read model every w.Sweep while this process holds
// the sweep lock, until ctx ends. It needs the River client to queue with.
func (w *Webhooks) RunSweep(ctx context.Context, client *river.Client[pgx.Tx]) {
	pglock.Lead(ctx, w.Pool.Config().ConnConfig, pglock.WebhookSweep, w.Log, "webhook-sweep", func(ctx context.Context) {
		t := time.NewTicker(w.Sweep)
		defer t.Stop()
		for {
			if err := w.expireHeld(ctx); err != nil && ctx.Err() == nil {
				w.Log.Warn("webhook expiry", "err", err)
			}
			if err := w.requeue(ctx, client); err != nil && ctx.Err() == nil {
				w.Log.Warn("webhook sweep", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// overdue is how late a delivery must be before the sweep queues it again:
// its own job is normally under way.
const overdue = time.Minute

// sweepBatch is how many overdue deliveries one sweep looks at.
const sweepBatch = 500

// requeue queues deliveries that are due for longer than overdue and may
// be attempted: their job was lost (a crash between recording and
// queueing). A job still waiting is the same job (unique while pending).
// Each sweep looks at sweepBatch of them, from where the last stopped, and
// starts over once it has reached the end: a backlog larger than a batch
// (a slow receiver's deliveries waiting for their share) does not hide
// another delivery's lost job behind it.
func (w *Webhooks) requeue(ctx context.Context, client *river.Client[pgx.Tx]) error {
	list, err := readapi.Overdue(ctx, w.Pool, w.Now().Add(-overdue), w.sweptTo, sweepBatch)
	if err != nil {
		return err
	}
	w.sweptTo = readapi.OverdueDelivery{}
	if len(list) == sweepBatch {
		w.sweptTo = list[len(list)-1]
	}
	if len(list) == 0 {
		return nil
	}
	due := make([]readapi.DueDelivery, len(list))
	for i, d := range list {
		due[i] = d.DueDelivery
	}
	// A running job is the delivery's own, under way: nothing to add.
	_, err = insertDue(ctx, client, nextAttempts(due))
	return err
}

// sweepEvery is how often held deliveries are looked at for expiry; one
// may outlive delivery.HoldCap by that much.
const sweepEvery = time.Minute

// expireHeld fails the deliveries that waited longer than
// delivery.HoldCap for their paused or disabled endpoint, at most 500 per
// sweepEvery. Each is decided on its own stream.
func (w *Webhooks) expireHeld(ctx context.Context) error {
	now := w.Now()
	if now.Sub(w.lastSweep) < sweepEvery {
		return nil
	}
	list, err := readapi.HeldSince(ctx, w.Pool, now.Add(-delivery.HoldCap), 500)
	if err != nil {
		return err
	}
	meta := commands.Started(dispatchMeta.Actor)
	for _, h := range list {
		if err := w.Commands.ExpireDelivery(ctx, h.ID, h.Disabled, meta); err != nil {
			return err
		}
	}
	w.lastSweep = now
	return nil
}

// drain reads a little of the body so the connection can be reused.
func drain(resp *http.Response) {
	buf := make([]byte, 4096)
	for i := 0; i < 16; i++ {
		if _, err := resp.Body.Read(buf); err != nil {
			break
		}
	}
	resp.Body.Close()
}
