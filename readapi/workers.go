package readapi

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/datakeys"
)

// The queries in this file are the ones the pipeline and webhook delivery
// run against the read models before they act.

// SendChecks is what the pipeline checks before an email leaves.
type SendChecks struct {
	Suspended  bool     // the account is suspended
	CanSend    bool     // the domain is the account's and verified
	Suppressed []string // the given recipients the account suppresses, lower case
	// Unlisted says the emails read model has no row for the email: it
	// was erased (an erasure is answered once its row is gone), or the
	// read model has not reached it yet.
	Unlisted bool
}

// EmailChecks reads the SendChecks of email emailID in one statement.
// The domain is the one the email was queued under (domainID; "" for
// emails recorded before it was kept): one removed and added again under
// the same name is another domain, with other keys, and its emails do not
// send. Recipients are matched to suppressions by their keys, so an
// address stays suppressed after the emails that suppressed it are erased.
func EmailChecks(ctx context.Context, q Querier, keys datakeys.AddressKeys, emailID, accountID, domainID, domainName string, addresses []string) (SendChecks, error) {
	lower := make([]string, len(addresses))
	for i, a := range addresses {
		lower[i] = strings.ToLower(a)
	}
	rows, err := q.Query(ctx, `SELECT
		EXISTS (SELECT 1 FROM accounts WHERE id = $1 AND status = 'suspended'),
		EXISTS (SELECT 1 FROM domains WHERE account_id = $1 AND name = $2 AND status = $5 AND ($6 = '' OR id = $6)),
		ARRAY(SELECT DISTINCT r.address FROM unnest($3::text[], $4::text[]) AS r(address, key)
			WHERE EXISTS (SELECT 1 FROM suppressions s WHERE s.account_id = $1 AND s.address_key = r.key)
			ORDER BY r.address),
		NOT EXISTS (SELECT 1 FROM emails WHERE id = $7)`,
		accountID, domainName, lower, keys.OfRecipients(accountID, lower), string(sendingdomain.StatusVerified), domainID, emailID)
	if err != nil {
		return SendChecks{}, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[SendChecks])
}

// StuckEmails counts the emails queued longer than age ago that have not
// left the service; a suspended account's emails wait by design and are
// not counted. It looks in each account's queued emails through the
// (account, status) index, so a scrape costs the accounts and the emails
// queued, never a scan of every email ever sent.
func StuckEmails(ctx context.Context, q Querier, age time.Duration) (int64, error) {
	rows, err := q.Query(ctx, `SELECT coalesce(sum(n), 0)::bigint FROM accounts a, LATERAL (
		SELECT count(*) AS n FROM emails e
		WHERE e.account_id = a.id AND e.status = 'queued' AND e.created_at < now() - $1::interval) q
		WHERE a.status <> 'suspended'`, age)
	if err != nil {
		return 0, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
}

// DomainToPoll is a domain whose verification or key change is under way.
type DomainToPoll struct {
	ID    string
	State sendingdomain.State
}

// DomainsToPoll lists the domains pending verification or in a key
// transition, oldest first.
func DomainsToPoll(ctx context.Context, q Querier) ([]DomainToPoll, error) {
	// A key change of a domain that is not verified waits for nothing
	// (none starts now; an older one of a failed domain never cuts over).
	states, err := queryDomains(ctx, q, `status = 'pending' OR (transition_kind IS NOT NULL AND status = 'verified')`, `created_at`)
	if err != nil {
		return nil, err
	}
	work := make([]DomainToPoll, len(states))
	for i, st := range states {
		work[i] = DomainToPoll{ID: st.ID, State: st}
	}
	return work, nil
}

// WebhookTarget is an endpoint an event is delivered to.
type WebhookTarget struct {
	ID       string
	Disabled bool // disabled after consecutive failures (not paused)
}

// WebhookTargets lists an account's endpoints subscribed to eventType that
// existed at at, by id.
func WebhookTargets(ctx context.Context, q Querier, accountID, eventType string, at time.Time) ([]WebhookTarget, error) {
	rows, err := q.Query(ctx, `SELECT id, disabled_reason IS NOT NULL FROM webhook_endpoints
		WHERE account_id = $1 AND $2 = ANY(event_types) AND created_at <= $3 ORDER BY id`, accountID, eventType, at)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[WebhookTarget])
}

// Subscriptions is which event types the endpoints of some accounts
// subscribe to, as of the webhooks read model's checkpoint.
type Subscriptions struct {
	Made            bool   // the read model exists and has a checkpoint
	Commit, Prepare uint64 // its checkpoint
	Accounts, Types []string
}

// SubscribedTypes reads, in one statement, the checkpoint of projection
// and the (account, event type) pairs of the endpoints of accounts.
func SubscribedTypes(ctx context.Context, q Querier, projection string, accounts []string) (Subscriptions, error) {
	rows, err := q.Query(ctx, `SELECT c.commit_position, c.prepare_position, e.accounts, e.types
		FROM (SELECT array_agg(account_id) AS accounts, array_agg(event_type) AS types
			FROM (SELECT DISTINCT account_id, unnest(event_types) AS event_type FROM webhook_endpoints
				WHERE account_id = ANY($2)) p) e
		LEFT JOIN projection_checkpoints c ON c.name = $1`, projection, accounts)
	var s Subscriptions
	if err == nil {
		var commit, prepare *int64
		_, err = pgx.ForEachRow(rows, []any{&commit, &prepare, &s.Accounts, &s.Types}, func() error {
			if commit != nil && prepare != nil {
				s.Made, s.Commit, s.Prepare = true, uint64(*commit), uint64(*prepare)
			}
			return nil
		})
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return Subscriptions{}, nil // the read model is not made yet
	}
	return s, err
}

// AttemptEndpoint is what an attempt needs of its endpoint.
type AttemptEndpoint struct {
	URL          string
	SealedSecret string
	Active       bool
	Clean        bool // no consecutive failures
	Suspended    bool // its account is suspended
	EventTypes   []string
	// EmailUnlisted says the emails read model has no row for the
	// delivery's email: erased (an erasure is answered once the row is
	// gone), or not reached yet.
	EmailUnlisted bool
}

// EndpointForAttempt reads an endpoint for an attempt of a delivery of
// email emailID ("" for a test event); ErrNotFound when it was deleted.
func EndpointForAttempt(ctx context.Context, q Querier, endpointID, emailID string) (AttemptEndpoint, error) {
	rows, err := q.Query(ctx, `SELECT e.url, e.sealed_secret, e.is_active, e.consecutive_failures = 0,
		EXISTS (SELECT 1 FROM accounts a WHERE a.id = e.account_id AND a.status = 'suspended'), e.event_types,
		$2 <> '' AND NOT EXISTS (SELECT 1 FROM emails m WHERE m.id = $2)
		FROM webhook_endpoints e WHERE e.id = $1`, endpointID, emailID)
	if err != nil {
		return AttemptEndpoint{}, err
	}
	e, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[AttemptEndpoint])
	if errors.Is(err, pgx.ErrNoRows) {
		return e, ErrNotFound
	}
	return e, err
}

// DueDelivery is a pending delivery whose next attempt is to be queued.
type DueDelivery struct {
	ID         string
	AccountID  string
	EndpointID string
	Attempts   int // made so far
}

// PendingDelivery is a pending delivery with its place in PendingOf's order.
type PendingDelivery struct {
	DueDelivery
	CreatedAt time.Time
}

// PendingOf lists the pending deliveries of active endpoints, of one
// endpoint or, when accountID is given, of one account, oldest event first
// (then by id), after the delivery after (the zero value: from the start),
// limit at a time.
func PendingOf(ctx context.Context, q Querier, endpointID, accountID string, after PendingDelivery, limit int) ([]PendingDelivery, error) {
	match, key := "d.endpoint_id = $1", endpointID
	if accountID != "" {
		match, key = "d.account_id = $1", accountID
	}
	rows, err := q.Query(ctx, `SELECT d.id, d.account_id, d.endpoint_id, d.attempts, d.created_at FROM webhook_deliveries d
		JOIN webhook_endpoints e ON e.id = d.endpoint_id
		WHERE `+match+` AND d.status = 'pending' AND e.is_active AND (d.created_at, d.id) > ($2, $3)
		ORDER BY d.created_at, d.id LIMIT $4`, key, after.CreatedAt, after.ID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PendingDelivery])
}

// OverdueDelivery is a delivery Overdue lists, with its place in its order.
type OverdueDelivery struct {
	DueDelivery
	NextAttemptAt time.Time
}

// Overdue lists the deliveries due before before that may be attempted
// (not held, endpoint active, account not suspended), earliest first (then
// by id), after the delivery after (the zero value: from the start), limit
// at a time.
func Overdue(ctx context.Context, q Querier, before time.Time, after OverdueDelivery, limit int) ([]OverdueDelivery, error) {
	rows, err := q.Query(ctx, `SELECT d.id, d.account_id, d.endpoint_id, d.attempts, d.next_attempt_at
		FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
		WHERE d.status = 'pending' AND NOT d.held AND d.next_attempt_at <= $1 AND e.is_active
		AND d.next_attempt_at >= $2 AND (d.next_attempt_at, d.id) > ($2, $3)
		AND NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = d.account_id AND a.status = 'suspended')
		ORDER BY d.next_attempt_at, d.id LIMIT $4`, before, after.NextAttemptAt, after.ID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[OverdueDelivery])
}

// HeldDelivery is a delivery waiting for its paused or disabled endpoint.
type HeldDelivery struct {
	ID       string
	Disabled bool // its endpoint is disabled (not paused)
}

// HeldSince lists the deliveries held since before before, oldest first.
func HeldSince(ctx context.Context, q Querier, before time.Time, limit int) ([]HeldDelivery, error) {
	rows, err := q.Query(ctx, `SELECT d.id, e.disabled_reason IS NOT NULL
		FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
		WHERE d.status = 'pending' AND d.held AND d.created_at < $1
		ORDER BY d.created_at LIMIT $2`, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[HeldDelivery])
}

// DeliveriesOfEmail lists the ids of every webhook delivery of an email.
func DeliveriesOfEmail(ctx context.Context, q Querier, emailID string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM webhook_deliveries WHERE email_id = $1 ORDER BY id`, emailID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SealedSecret is a webhook endpoint's signing secret as sealed.
type SealedSecret struct {
	EndpointID string
	AccountID  string
	Sealed     string
}

// WebhookSecrets lists every endpoint's sealed secret, for a check of the
// master keys they are sealed under.
func WebhookSecrets(ctx context.Context, q Querier) ([]SealedSecret, error) {
	rows, err := q.Query(ctx, `SELECT id, account_id, sealed_secret FROM webhook_endpoints ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[SealedSecret])
}

// AllDomains lists every domain of every account, for a check of the
// master keys their DKIM keys are sealed under.
func AllDomains(ctx context.Context, q Querier) ([]sendingdomain.State, error) {
	return queryDomains(ctx, q, `true`, `id`)
}
