package processmanagers

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
	Tenures     *pglock.Tenures    // records how the sweep is doing; may be nil

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
