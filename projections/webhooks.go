package projections

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Webhooks projects webhook endpoints and their deliveries: the routes'
// views, and the due list the dispatcher polls. Deleting an endpoint
// deletes its delivery history. A delivery waiting for a paused or
// disabled endpoint is pending and held: held deliveries stay out of the
// due index, so however many wait, the dispatcher's poll does not walk
// them. Skipped and expired ones are failed with their error.
//
// The tables hold nothing of an email's personal data: a delivery's
// payload (recipients, subject) stays in its sealed event. When an email
// is erased, its pending deliveries fail with delivery.DroppedError and
// leave the due and held sets, so no worker picks them; a delivery read
// with its email erased is recorded that way from the start.
type Webhooks struct{}

func (Webhooks) Name() Name       { return WebhooksName }
func (Webhooks) Version() int     { return 3 }
func (Webhooks) Tables() []string { return []string{"webhook_endpoints", "webhook_deliveries"} }

func (Webhooks) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS webhook_endpoints (
    id                   text PRIMARY KEY,
    account_id           text NOT NULL,
    url                  text NOT NULL,
    description          text NOT NULL,
    event_types          text[] NOT NULL,
    sealed_secret        text NOT NULL,
    is_active            boolean NOT NULL,
    disabled_reason      text,
    consecutive_failures integer NOT NULL DEFAULT 0,
    last_success_at      timestamptz,
    last_failure_at      timestamptz,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_endpoints_account_idx ON webhook_endpoints (account_id, created_at);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id              text PRIMARY KEY,
    endpoint_id     text NOT NULL,
    account_id      text NOT NULL,
    email_id        text NOT NULL,
    event_type      text NOT NULL,
    status          text NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    response_status integer,
    error           text,
    created_at      timestamptz NOT NULL,
    last_attempt_at timestamptz,
    delivered_at    timestamptz,
    next_attempt_at timestamptz,
    held            boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, created_at DESC);
CREATE INDEX IF NOT EXISTS webhook_deliveries_email_idx ON webhook_deliveries (email_id);
CREATE INDEX IF NOT EXISTS webhook_deliveries_failed_idx ON webhook_deliveries (endpoint_id, created_at DESC) WHERE status = 'failed';
CREATE INDEX IF NOT EXISTS webhook_deliveries_pending_idx ON webhook_deliveries (endpoint_id, created_at DESC) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending' AND NOT held;
CREATE INDEX IF NOT EXISTS webhook_deliveries_held_idx ON webhook_deliveries (created_at) WHERE status = 'pending' AND held;`
}

// erasedDeliveries fails an erased email's pending deliveries, as their
// streams will once dropped, which takes them out of the due and held sets.
const erasedDeliveries = `UPDATE webhook_deliveries SET status = 'failed', error = $2, next_attempt_at = NULL
	WHERE email_id = $1 AND status = 'pending'`

// holdDeliveries takes a paused or disabled endpoint's pending deliveries
// out of the due index.
const holdDeliveries = `UPDATE webhook_deliveries SET held = true WHERE endpoint_id = $1 AND status = 'pending' AND NOT held`

func (w Webhooks) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	e, known, err := codec.DecodeKnown(ev)
	if err != nil || !known {
		return err
	}
	w.apply(e, b)
	return nil
}

// ApplyBatch applies the batch as Apply of each event in turn would, with
// one statement for each run of deliveries recorded one after the other
// (a fan-out's), one pair for each run of successful attempts and one pair
// for each run of failed ones: the busiest events (a receiver that refuses
// makes seven failed attempts of each event). Every other event keeps its
// own statements, in order.
func (w Webhooks) ApplyBatch(events []eventstore.RecordedEvent, b *pgx.Batch) error {
	var created []*delivery.Created
	var succeeded []*delivery.AttemptSucceeded
	var failed []*delivery.AttemptFailed
	flush := func() {
		if len(created) > 0 {
			queueCreated(created, b)
			created = nil
		}
		if len(succeeded) > 0 {
			queueSucceeded(succeeded, b)
			succeeded = nil
		}
		if len(failed) > 0 {
			queueFailed(failed, b)
			failed = nil
		}
	}
	for _, ev := range events {
		e, known, err := codec.DecodeKnown(ev)
		if err != nil {
			return fmt.Errorf("event %s: %w", ev.ID, err)
		}
		if !known {
			continue
		}
		switch e := e.(type) {
		case *delivery.Created:
			if len(succeeded)+len(failed) > 0 {
				flush()
			}
			created = append(created, e)
		case *delivery.AttemptSucceeded:
			if len(created)+len(failed) > 0 {
				flush()
			}
			succeeded = append(succeeded, e)
		case *delivery.AttemptFailed:
			if len(created)+len(succeeded) > 0 {
				flush()
			}
			failed = append(failed, e)
		default:
			if webhooksRead(e) {
				flush()
				w.apply(e, b)
			}
		}
	}
	flush()
	return nil
}

// webhooksRead reports whether the projector reads e.
func webhooksRead(e domain.Event) bool {
	switch e.(type) {
	case *webhook.Created, *webhook.Updated, *webhook.Paused, *webhook.Resumed, *webhook.Disabled,
		*webhook.SecretRotated, *webhook.Deleted, *webhook.EventExhausted, *webhook.FailuresReset,
		*delivery.Created, *delivery.AttemptSucceeded, *delivery.AttemptFailed, *delivery.Skipped, *delivery.Expired,
		*delivery.Dropped, *email.Erased:
		return true
	}
	return false
}

// queueCreated records deliveries as Apply does one by one: only for
// endpoints that exist, held when the endpoint is inactive, failed at once
// when read with the email erased.
func queueCreated(ds []*delivery.Created, b *pgx.Batch) {
	n := len(ds)
	ids, endpoints, accounts, emails, types := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at := make([]time.Time, n)
	erased := make([]bool, n)
	for i, d := range ds {
		ids[i], endpoints[i], accounts[i], emails[i], types[i], at[i] = d.DeliveryID, d.EndpointID, d.AccountID, d.EmailID, d.Type, d.CreatedAt
		erased[i] = d.Erased
	}
	b.Queue(`INSERT INTO webhook_deliveries (id, endpoint_id, account_id, email_id, event_type, status, error, created_at, next_attempt_at, held)
		SELECT d.id, d.endpoint_id, d.account_id, d.email_id, d.event_type,
			CASE WHEN d.erased THEN 'failed' ELSE 'pending' END, CASE WHEN d.erased THEN $8 END,
			d.created_at, CASE WHEN NOT d.erased THEN d.created_at END, NOT e.is_active
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::boolean[]) WITH ORDINALITY
			AS d(id, endpoint_id, account_id, email_id, event_type, created_at, erased, n)
		JOIN webhook_endpoints e ON e.id = d.endpoint_id
		ORDER BY d.n
		ON CONFLICT (id) DO NOTHING`, ids, endpoints, accounts, emails, types, at, erased, delivery.DroppedError)
}

// queueSucceeded records successful attempts as Apply does one by one: a
// delivery attempted twice in the run keeps its last attempt, an endpoint
// its latest success.
func queueSucceeded(as []*delivery.AttemptSucceeded, b *pgx.Batch) {
	last := make(map[string]int, len(as))
	for i, a := range as {
		last[a.DeliveryID] = i
	}
	var ids []string
	var attempts, statuses []int32
	var at []time.Time
	latest := map[string]time.Time{}
	for i, a := range as {
		if last[a.DeliveryID] == i {
			ids, attempts, statuses, at = append(ids, a.DeliveryID), append(attempts, int32(a.Attempt)), append(statuses, int32(a.ResponseStatus)), append(at, a.At)
		}
		if t, ok := latest[a.EndpointID]; !ok || a.At.After(t) {
			latest[a.EndpointID] = a.At
		}
	}
	b.Queue(`UPDATE webhook_deliveries d SET status = 'delivered', attempts = u.attempt, response_status = u.status, error = NULL,
			last_attempt_at = u.at, delivered_at = u.at, next_attempt_at = NULL
		FROM unnest($1::text[], $2::integer[], $3::integer[], $4::timestamptz[]) AS u(id, attempt, status, at)
		WHERE d.id = u.id`, ids, attempts, statuses, at)
	queueLatest(b, "last_success_at", latest)
}

// queueFailed records failed attempts as Apply does one by one: a delivery
// attempted twice in the run keeps its last attempt (pending with its next
// attempt's time, or failed when none is left), an endpoint its latest
// failure.
func queueFailed(as []*delivery.AttemptFailed, b *pgx.Batch) {
	last := make(map[string]int, len(as))
	for i, a := range as {
		last[a.DeliveryID] = i
	}
	var ids, statuses, errs []string
	var attempts []int32
	var codes []*int32
	var at []time.Time
	var next []*time.Time
	latest := map[string]time.Time{}
	for i, a := range as {
		if last[a.DeliveryID] == i {
			status, nextAt := "pending", &a.NextAttemptAt
			if a.NextAttemptAt.IsZero() {
				status, nextAt = "failed", nil
			}
			var code *int32
			if a.ResponseStatus != nil {
				c := int32(*a.ResponseStatus)
				code = &c
			}
			ids, statuses, attempts, codes = append(ids, a.DeliveryID), append(statuses, status), append(attempts, int32(a.Attempt)), append(codes, code)
			errs, at, next = append(errs, a.Error), append(at, a.At), append(next, nextAt)
		}
		if t, ok := latest[a.EndpointID]; !ok || a.At.After(t) {
			latest[a.EndpointID] = a.At
		}
	}
	b.Queue(`UPDATE webhook_deliveries d SET status = u.status, attempts = u.attempt, response_status = u.code, error = u.error,
			last_attempt_at = u.at, next_attempt_at = u.next
		FROM unnest($1::text[], $2::text[], $3::integer[], $4::integer[], $5::text[], $6::timestamptz[], $7::timestamptz[])
			AS u(id, status, attempt, code, error, at, next)
		WHERE d.id = u.id`, ids, statuses, attempts, codes, errs, at, next)
	queueLatest(b, "last_failure_at", latest)
}

// queueLatest moves each endpoint's column (last_success_at or
// last_failure_at) on to its time in latest, if later.
func queueLatest(b *pgx.Batch, column string, latest map[string]time.Time) {
	endpoints := make([]string, 0, len(latest))
	times := make([]time.Time, 0, len(latest))
	for id, t := range latest {
		endpoints, times = append(endpoints, id), append(times, t)
	}
	b.Queue(`UPDATE webhook_endpoints e SET `+column+` = greatest(coalesce(e.`+column+`, u.at), u.at)
		FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at) WHERE e.id = u.id`, endpoints, times)
}

// apply queues the statements of one event.
func (Webhooks) apply(e domain.Event, b *pgx.Batch) {
	switch e := e.(type) {
	case *webhook.Created:
		b.Queue(`INSERT INTO webhook_endpoints (id, account_id, url, description, event_types, sealed_secret, is_active, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, true, $7, $7) ON CONFLICT (id) DO NOTHING`,
			e.EndpointID, e.AccountID, e.URL, e.Description, e.EventTypes, e.SealedSecret, e.CreatedAt)
	case *webhook.Updated:
		b.Queue(`UPDATE webhook_endpoints SET url = coalesce($2, url), description = coalesce($3, description),
			event_types = coalesce($4, event_types), updated_at = $5 WHERE id = $1`,
			e.EndpointID, e.URL, e.Description, e.EventTypes, e.UpdatedAt)
	case *webhook.Paused:
		b.Queue(`UPDATE webhook_endpoints SET is_active = false, disabled_reason = NULL, updated_at = $2 WHERE id = $1`, e.EndpointID, e.PausedAt)
		b.Queue(holdDeliveries, e.EndpointID)
	case *webhook.Resumed:
		b.Queue(`UPDATE webhook_endpoints SET is_active = true, disabled_reason = NULL, consecutive_failures = 0, updated_at = $2 WHERE id = $1`, e.EndpointID, e.ResumedAt)
		b.Queue(`UPDATE webhook_deliveries SET held = false WHERE endpoint_id = $1 AND status = 'pending' AND held`, e.EndpointID)
	case *webhook.Disabled:
		b.Queue(`UPDATE webhook_endpoints SET is_active = false, disabled_reason = $2, updated_at = $3 WHERE id = $1`, e.EndpointID, e.Reason, e.DisabledAt)
		b.Queue(holdDeliveries, e.EndpointID)
	case *webhook.SecretRotated:
		b.Queue(`UPDATE webhook_endpoints SET sealed_secret = $2, updated_at = $3 WHERE id = $1`, e.EndpointID, e.SealedSecret, e.RotatedAt)
	case *webhook.Deleted:
		b.Queue(`DELETE FROM webhook_deliveries WHERE endpoint_id = $1`, e.EndpointID)
		b.Queue(`DELETE FROM webhook_endpoints WHERE id = $1`, e.EndpointID)
	case *webhook.EventExhausted:
		b.Queue(`UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1 WHERE id = $1`, e.EndpointID)
	case *webhook.FailuresReset:
		b.Queue(`UPDATE webhook_endpoints SET consecutive_failures = 0 WHERE id = $1`, e.EndpointID)
	case *delivery.Created:
		// Only for an endpoint that still exists: a deleted one's history is
		// gone. An inactive endpoint's is held.
		// One read with its email erased is dropped from the start.
		if e.Erased {
			b.Queue(`INSERT INTO webhook_deliveries (id, endpoint_id, account_id, email_id, event_type, status, error, created_at, held)
				SELECT $1, $2, $3, $4, $5, 'failed', $7, $6, NOT is_active FROM webhook_endpoints WHERE id = $2
				ON CONFLICT (id) DO NOTHING`, e.DeliveryID, e.EndpointID, e.AccountID, e.EmailID, e.Type, e.CreatedAt, delivery.DroppedError)
			return
		}
		b.Queue(`INSERT INTO webhook_deliveries (id, endpoint_id, account_id, email_id, event_type, status, created_at, next_attempt_at, held)
			SELECT $1, $2, $3, $4, $5, 'pending', $6, $6, NOT is_active FROM webhook_endpoints WHERE id = $2
			ON CONFLICT (id) DO NOTHING`, e.DeliveryID, e.EndpointID, e.AccountID, e.EmailID, e.Type, e.CreatedAt)
	case *delivery.AttemptSucceeded:
		b.Queue(`UPDATE webhook_deliveries SET status = 'delivered', attempts = $2, response_status = $3, error = NULL,
			last_attempt_at = $4, delivered_at = $4, next_attempt_at = NULL WHERE id = $1`, e.DeliveryID, e.Attempt, e.ResponseStatus, e.At)
		b.Queue(`UPDATE webhook_endpoints SET last_success_at = greatest(coalesce(last_success_at, $2), $2) WHERE id = $1`, e.EndpointID, e.At)
	case *delivery.AttemptFailed:
		status := "pending"
		var next any = e.NextAttemptAt
		if e.NextAttemptAt.IsZero() {
			status, next = "failed", nil
		}
		b.Queue(`UPDATE webhook_deliveries SET status = $2, attempts = $3, response_status = $4, error = $5,
			last_attempt_at = $6, next_attempt_at = $7 WHERE id = $1`, e.DeliveryID, status, e.Attempt, e.ResponseStatus, e.Error, e.At, next)
		b.Queue(`UPDATE webhook_endpoints SET last_failure_at = greatest(coalesce(last_failure_at, $2), $2) WHERE id = $1`, e.EndpointID, e.At)
	case *delivery.Skipped:
		b.Queue(`UPDATE webhook_deliveries SET status = 'failed', error = $2, next_attempt_at = NULL WHERE id = $1`, e.DeliveryID, e.Error)
	case *delivery.Expired:
		b.Queue(`UPDATE webhook_deliveries SET status = 'failed', error = $2, next_attempt_at = NULL WHERE id = $1`, e.DeliveryID, e.Error)
	case *delivery.Dropped:
		b.Queue(`UPDATE webhook_deliveries SET status = 'failed', error = $2, next_attempt_at = NULL WHERE id = $1`, e.DeliveryID, delivery.DropError(e.Reason))
	case *email.Erased:
		b.Queue(erasedDeliveries, e.EmailID, delivery.DroppedError)
	}
}
