package processmanagers

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/secretbox"
	whsig "github.com/mailroom/mailroom/webhook"
)

// Fanout turns each email event into one delivery per endpoint of the
// account that subscribes to its type. A paused endpoint's deliveries wait
// for it (the dispatcher attempts only active endpoints'); an endpoint
// disabled after failures gets its deliveries recorded as skipped.
type Fanout struct {
	Commands *commands.Service
	// Endpoints lists the account's endpoints that subscribe to eventType,
	// active or not.
	Endpoints func(ctx context.Context, accountID, eventType string) ([]Target, error)
	Settle    commands.Settle
	Wake      func() // tells the dispatcher new deliveries are waiting
}

// Target is an endpoint an event goes to.
type Target struct {
	ID       string
	Disabled bool // disabled after consecutive failures (not paused)
}

var fanoutMeta = commands.Meta{Actor: "system:webhook-fanout"}

// webhookEvent maps a timeline event to its webhook type, time and the
// fields it adds to the envelope's data.
func webhookEvent(e domain.Event) (typ string, at time.Time, extra map[string]any, ok bool) {
	switch e := e.(type) {
	case *email.Sent:
		return "email.sent", e.SentAt, nil, true
	case *email.Delivered:
		return "email.delivered", e.OccurredAt, nil, true
	case *email.Bounced:
		return "email.bounced", e.OccurredAt, map[string]any{"bounce_type": e.BounceType, "bounce_subtype": e.BounceSubtype}, true
	case *email.Complained:
		return "email.complained", e.OccurredAt, nil, true
	case *email.Opened:
		return "email.opened", e.OccurredAt, nil, true
	case *email.Clicked:
		return "email.clicked", e.OccurredAt, map[string]any{"link": e.Link}, true
	case *email.Failed:
		return "email.failed", e.FailedAt, map[string]any{"reason": e.Reason}, true
	}
	return "", time.Time{}, nil, false
}

// Handle reacts to email timeline events.
func (f *Fanout) Handle(ctx context.Context, ev eventstore.RecordedEvent) error {
	if !strings.HasPrefix(ev.StreamID, "email-") {
		return nil
	}
	e, err := codec.Decode(ev)
	if err != nil || e == nil {
		return err
	}
	typ, at, extra, ok := webhookEvent(e)
	if !ok {
		return nil
	}
	st, queuedAt, err := f.Commands.EmailSince(ctx, strings.TrimPrefix(ev.StreamID, "email-"))
	if err != nil {
		return Transient(err)
	}
	if !st.Exists() {
		return nil
	}
	q := st.Queued
	// Endpoints created before the email was sent must be seen. (Waiting
	// for this event's own position would hold every event up for a
	// projection cycle; an endpoint created while the email is under way
	// gets its later events only.)
	f.Settle(ctx, queuedAt, "webhooks")
	endpoints, err := f.Endpoints(ctx, q.AccountID, typ)
	if err != nil || len(endpoints) == 0 {
		return transient(err)
	}
	tags := q.Tags
	if tags == nil {
		tags = map[string]string{}
	}
	data := map[string]any{"email_id": q.EmailID, "from": q.From, "to": strings.Join(q.To, ", "), "subject": q.Subject, "tags": tags}
	for k, v := range extra {
		data[k] = v
	}
	payload, err := json.Marshal(commands.Envelope{Type: typ, CreatedAt: at.UTC().Format("2006-01-02T15:04:05.000Z"), Data: data})
	if err != nil {
		return err
	}
	ds := make([]commands.NewDelivery, len(endpoints))
	for i, ep := range endpoints {
		// One delivery per (event, endpoint), whatever the redeliveries.
		id := uuid.NewHash(sha1.New(), deliveryNamespace, []byte(ev.ID.String()+"/"+ep.ID), 5).String()
		ds[i] = commands.NewDelivery{Created: delivery.Created{DeliveryID: id, EndpointID: ep.ID, AccountID: q.AccountID,
			EmailID: q.EmailID, Type: typ, Payload: string(payload), CreatedAt: at}, Skipped: ep.Disabled}
	}
	_, last, err := f.Commands.CreateDeliveries(ctx, ds, fanoutMeta)
	if err != nil {
		return Transient(err)
	}
	if f.Wake != nil {
		// Wake the dispatcher once the rows it polls exist, without holding
		// up the next event.
		go func() {
			f.Settle(context.WithoutCancel(ctx), last, "webhooks")
			f.Wake()
		}()
	}
	return nil
}

var deliveryNamespace = uuid.MustParse("0c9b8f0e-4b8a-4d8e-9c55-2f6a0e3d7b21")

// Dispatcher attempts due deliveries: the first attempt as soon as a
// delivery exists, retries when their time comes. Attempts run in
// parallel, bounded overall and per endpoint, so a slow receiver delays
// only its own deliveries. Its timers are the deliveries' next_attempt_at
// in the read model: they survive restarts, and the delivery's stream
// decides each attempt once.
type Dispatcher struct {
	Pool        *pgxpool.Pool
	Commands    *commands.Service
	Box         *secretbox.Box
	Client      *http.Client // the egress client, with the 10 s receiver time-out
	Schedule    []time.Duration
	Now         func() time.Time
	Log         *slog.Logger
	Poll        time.Duration
	MaxInFlight int
	PerEndpoint int
	UserAgent   string
	Outcomes    *Outcomes // may be nil

	once      sync.Once
	lastSweep time.Time // of held deliveries, by Now
	wake      chan struct{}
	mu        sync.Mutex
	inFlight  map[string]bool
	perEP     map[string]int
	slots     chan struct{}
}

var dispatchMeta = commands.Meta{Actor: "system:webhook-dispatcher"}

func (d *Dispatcher) init() {
	d.once.Do(func() {
		d.wake = make(chan struct{}, 1)
		d.inFlight = map[string]bool{}
		d.perEP = map[string]int{}
		d.slots = make(chan struct{}, d.MaxInFlight)
	})
}

// Wake makes the dispatcher look for due deliveries now.
func (d *Dispatcher) Wake() {
	d.init()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// dispatcherLock makes one instance dispatch at a time; another takes over
// within about a second when it goes away.
const dispatcherLock = 7261003

// Run dispatches while this instance holds the dispatcher lock, until ctx
// ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.init()
	Exclusive(ctx, d.Pool, dispatcherLock, d.Log, "webhook-dispatcher", d.loop)
	return nil
}

// loop dispatches until ctx ends, then waits for attempts under way.
func (d *Dispatcher) loop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(d.Poll)
	defer t.Stop()
	for {
		if err := d.expireHeld(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("webhook expiry", "err", err)
		}
		if err := d.dispatch(ctx, &wg); err != nil && ctx.Err() == nil {
			d.Log.Warn("webhook dispatch", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
	}
}

// sweepEvery is how often held deliveries are looked at for expiry; one
// may outlive delivery.HoldCap by that much.
const sweepEvery = time.Minute

// expireHeld fails the deliveries that waited longer than
// delivery.HoldCap for their paused or disabled endpoint, at most 500 per
// sweepEvery. Each is decided on its own stream; one whose attempt is under
// way (its endpoint was paused meanwhile) is left to that attempt.
func (d *Dispatcher) expireHeld(ctx context.Context) error {
	now := d.Now()
	if now.Sub(d.lastSweep) < sweepEvery {
		return nil
	}
	rows, err := d.Pool.Query(ctx, `SELECT d.id, e.disabled_reason IS NOT NULL
		FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
		WHERE d.status = 'pending' AND d.held AND d.created_at < $1
		ORDER BY d.created_at LIMIT 500`, now.Add(-delivery.HoldCap))
	if err != nil {
		return err
	}
	type held struct {
		ID       string
		Disabled bool
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[held])
	if err != nil {
		return err
	}
	for _, h := range list {
		d.mu.Lock()
		busy := d.inFlight[h.ID]
		d.mu.Unlock()
		if busy {
			continue
		}
		if err := d.Commands.ExpireDelivery(ctx, h.ID, h.Disabled, dispatchMeta); err != nil {
			return err
		}
	}
	d.lastSweep = now
	return nil
}

type due struct {
	id, endpoint, url, sealed string
	clean                     bool // the endpoint has no failures counted
}

func (d *Dispatcher) dispatch(ctx context.Context, wg *sync.WaitGroup) error {
	// A suspended account's deliveries wait, unattempted, so none of their
	// retries is spent; they are due at once when it is reinstated.
	rows, err := d.Pool.Query(ctx, `SELECT d.id, d.endpoint_id, e.url, e.sealed_secret, e.consecutive_failures = 0
		FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
		WHERE d.status = 'pending' AND NOT d.held AND d.next_attempt_at <= $1 AND e.is_active
		AND NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = d.account_id AND a.status = 'suspended')
		ORDER BY d.next_attempt_at LIMIT 500`, d.Now())
	if err != nil {
		return err
	}
	var work []due
	for rows.Next() {
		var w due
		if err := rows.Scan(&w.id, &w.endpoint, &w.url, &w.sealed, &w.clean); err != nil {
			rows.Close()
			return err
		}
		work = append(work, w)
	}
	rows.Close()
	for _, w := range work {
		d.mu.Lock()
		busy := d.inFlight[w.id] || d.perEP[w.endpoint] >= d.PerEndpoint
		if !busy {
			d.inFlight[w.id] = true
			d.perEP[w.endpoint]++
		}
		d.mu.Unlock()
		if busy {
			continue
		}
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			d.release(w)
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				<-d.slots
				d.release(w)
				d.Wake() // a slot is free: look for more
			}()
			if err := d.attempt(context.WithoutCancel(ctx), w); err != nil {
				d.Log.Warn("webhook attempt", "delivery_id", w.id, "err", err)
			}
		}()
	}
	return rows.Err()
}

func (d *Dispatcher) release(w due) {
	d.mu.Lock()
	delete(d.inFlight, w.id)
	d.perEP[w.endpoint]--
	if d.perEP[w.endpoint] <= 0 {
		delete(d.perEP, w.endpoint)
	}
	d.mu.Unlock()
}

// attempt makes one attempt of a due delivery and records it.
func (d *Dispatcher) attempt(ctx context.Context, w due) error {
	st, expected, err := d.Commands.Delivery(ctx, w.id)
	if err != nil {
		return err
	}
	if !st.Due(d.Now()) {
		return nil // attempted meanwhile, or not due yet by the stream
	}
	secret, err := d.Box.Open(w.sealed, commands.SecretContext(w.endpoint))
	if err != nil {
		return err
	}
	body := []byte(st.Created.Payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.UserAgent)
	req.Header.Set(whsig.HeaderSignature, whsig.Sign(string(secret), body, d.Now()))
	req.Header.Set(whsig.HeaderEventType, st.Created.Type)
	req.Header.Set(whsig.HeaderDeliveryID, w.id)
	var o delivery.Outcome
	resp, err := d.Client.Do(req)
	if err != nil {
		o.Error = egress.Describe(err)
	} else {
		drain(resp)
		code := resp.StatusCode
		o.ResponseStatus = &code
		o.Error = egress.DescribeStatus(code)
	}
	d.Outcomes.attempt(o.Succeeded())
	_, err = d.Commands.RecordAttempt(ctx, st, expected, o, d.Schedule, rand.Float64()*2-1, w.clean, dispatchMeta)
	return err
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
