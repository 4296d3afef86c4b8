package readapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/apitime"
)

// WebhookEndpoint is an endpoint as the API shows it: never the secret.
type WebhookEndpoint struct {
	ID                  string       `json:"id"`
	URL                 string       `json:"url"`
	Description         string       `json:"description"`
	EventTypes          []string     `json:"event_types"`
	IsActive            bool         `json:"is_active"`
	DisabledReason      *string      `json:"disabled_reason"`
	ConsecutiveFailures int          `json:"consecutive_failures"`
	LastSuccessAt       apitime.Time `json:"last_success_at"`
	LastFailureAt       apitime.Time `json:"last_failure_at"`
	CreatedAt           apitime.Time `json:"created_at"`
	UpdatedAt           apitime.Time `json:"updated_at"`
}

const endpointColumns = `id, url, description, event_types, is_active, disabled_reason, consecutive_failures,
	last_success_at, last_failure_at, created_at, updated_at`

func scanEndpoint(row pgx.CollectableRow) (WebhookEndpoint, error) {
	var e WebhookEndpoint
	var success, failure *time.Time
	var created, updated time.Time
	err := row.Scan(&e.ID, &e.URL, &e.Description, &e.EventTypes, &e.IsActive, &e.DisabledReason, &e.ConsecutiveFailures,
		&success, &failure, &created, &updated)
	if success != nil {
		e.LastSuccessAt = apitime.Of(*success)
	}
	if failure != nil {
		e.LastFailureAt = apitime.Of(*failure)
	}
	e.CreatedAt, e.UpdatedAt = apitime.Of(created), apitime.Of(updated)
	return e, err
}

// WebhookEndpoint reads an endpoint of an account; a *NotFoundError when
// the account has no such endpoint.
func (r *Reader) WebhookEndpoint(ctx context.Context, accountID, id string) (WebhookEndpoint, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1 AND account_id = $2`, id, accountID)
	if err != nil {
		return WebhookEndpoint{}, err
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEndpoint)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, &NotFoundError{Resource: "webhook endpoint"}
	}
	return e, err
}

// EndpointIDs lists an account's endpoints.
func EndpointIDs(ctx context.Context, q Querier, accountID string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM webhook_endpoints WHERE account_id = $1 ORDER BY id`, accountID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// WebhookEndpoints lists an account's endpoints, oldest first.
func (r *Reader) WebhookEndpoints(ctx context.Context, accountID string) ([]WebhookEndpoint, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE account_id = $1 ORDER BY created_at, id`, accountID)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, scanEndpoint)
	if list == nil {
		list = []WebhookEndpoint{}
	}
	return list, err
}

// Delivery is a webhook delivery as the API shows it.
type Delivery struct {
	ID             string       `json:"id"`
	EmailID        string       `json:"email_id"`
	EventType      string       `json:"event_type"`
	Status         string       `json:"status"`
	Attempts       int          `json:"attempts"`
	ResponseStatus *int         `json:"response_status"`
	Error          *string      `json:"error"`
	CreatedAt      apitime.Time `json:"created_at"`
	LastAttemptAt  apitime.Time `json:"last_attempt_at"`
	DeliveredAt    apitime.Time `json:"delivered_at"`
}

// DeliveryFilter selects a page of an endpoint's deliveries, newest first.
type DeliveryFilter struct {
	Status string // pending, delivered or failed; empty for all
	Limit  int
	// After is the id of the last delivery of the previous page: the page
	// holds the ones listed after it (older). Empty for the first page.
	After string
}

// DeliveryPage is one page of deliveries.
type DeliveryPage struct {
	Deliveries []Delivery
	HasMore    bool // more are listed after the last of this page
}

// ErrNoSuchDelivery: DeliveryFilter.After names no delivery of the endpoint.
var ErrNoSuchDelivery = errors.New("no such delivery of this endpoint")

// deliveriesQueries are the list's queries, by status filter and by
// whether a page follows a cursor, with both written out: the partial
// indexes of failed and of pending deliveries (few, and the ones a reader
// looks for) serve only a query that names the status, and the cursor
// bounds the index scan only where the query holds it unconditionally (a
// plan made for any cursor would otherwise filter the whole log).
var deliveriesQueries = func() map[deliveriesKey]string {
	out := map[deliveriesKey]string{}
	for _, status := range []string{"", "pending", "delivered", "failed"} {
		for _, after := range []bool{false, true} {
			out[deliveriesKey{status, after}] = deliveriesQuery(status, after)
		}
	}
	return out
}()

type deliveriesKey struct {
	status string
	after  bool
}

// deliveriesQuery lists an endpoint's deliveries ($1, of account $2) newest
// first, $3 at most; with after, those listed after the delivery $4 (and
// whether $4 is one of the endpoint's), else $4 is ignored.
func deliveriesQuery(status string, after bool) string {
	filter := ""
	if status != "" {
		filter = "AND status = '" + status + "'"
	}
	if !after {
		return `SELECT false, id, email_id, event_type, status, attempts, response_status, error,
				created_at, last_attempt_at, delivered_at
			FROM webhook_deliveries WHERE endpoint_id = $1 AND account_id = $2 ` + filter + ` AND $4::text IS NOT NULL
			ORDER BY created_at DESC, id DESC LIMIT $3`
	}
	return `WITH after AS (SELECT created_at, id FROM webhook_deliveries WHERE id = $4 AND endpoint_id = $1)
		SELECT NOT EXISTS (SELECT 1 FROM after), d.*
		FROM (SELECT 1) one LEFT JOIN LATERAL (
			SELECT id, email_id, event_type, status, attempts, response_status, error,
				created_at, last_attempt_at, delivered_at
			FROM webhook_deliveries WHERE endpoint_id = $1 AND account_id = $2 ` + filter + `
				AND (created_at, id) < (SELECT created_at, id FROM after)
			ORDER BY created_at DESC, id DESC LIMIT $3) d ON true`
}

// Deliveries lists a page of the deliveries to an endpoint of an account,
// newest first; none when the account has no such endpoint.
func (r *Reader) Deliveries(ctx context.Context, accountID, endpointID string, f DeliveryFilter) (DeliveryPage, error) {
	query, ok := deliveriesQueries[deliveriesKey{f.Status, f.After != ""}]
	if !ok {
		return DeliveryPage{}, fmt.Errorf("deliveries: unknown status %q", f.Status)
	}
	rows, err := r.pool.Query(ctx, query, endpointID, accountID, f.Limit+1, f.After)
	if err != nil {
		return DeliveryPage{}, err
	}
	unknownAfter := false
	var list []Delivery
	for rows.Next() {
		var d Delivery
		var id, emailID, eventType, status *string
		var attempts *int
		var created, last, delivered *time.Time
		if err := rows.Scan(&unknownAfter, &id, &emailID, &eventType, &status, &attempts, &d.ResponseStatus, &d.Error, &created, &last, &delivered); err != nil {
			rows.Close()
			return DeliveryPage{}, err
		}
		if id == nil {
			continue // the page is empty
		}
		d.ID, d.EmailID, d.EventType, d.Status, d.Attempts = *id, *emailID, *eventType, *status, *attempts
		d.CreatedAt = apitime.Of(*created)
		if last != nil {
			d.LastAttemptAt = apitime.Of(*last)
		}
		if delivered != nil {
			d.DeliveredAt = apitime.Of(*delivered)
		}
		list = append(list, d)
	}
	if err := rows.Err(); err != nil {
		return DeliveryPage{}, err
	}
	if unknownAfter {
		return DeliveryPage{}, ErrNoSuchDelivery
	}
	page := DeliveryPage{Deliveries: list, HasMore: len(list) > f.Limit}
	if page.HasMore {
		page.Deliveries = list[:f.Limit]
	}
	if page.Deliveries == nil {
		page.Deliveries = []Delivery{}
	}
	return page, nil
}
