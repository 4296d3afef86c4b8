package readapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
)

// EmailListItem is one row of GET /v1/emails.
type EmailListItem struct {
	ID              string       `json:"id"`
	FromEmail       string       `json:"from_email"`
	ToEmail         string       `json:"to_email"`
	Subject         string       `json:"subject"`
	Status          string       `json:"status"`
	AttachmentCount int          `json:"attachment_count"`
	CreatedAt       apitime.Time `json:"created_at"`
}

// Pagination describes a page of a list.
type Pagination struct {
	Page       int `json:"page"`
	PerPage    int `json:"per_page"`
	Total      int `json:"total"`
	TotalPages int `json:"total_pages"`
}

func (r reader) listEmails(c echo.Context) error {
	page, pageErr := httpserver.QueryInt(c, "page", 1, 1<<31-1)
	perPage, perPageErr := httpserver.QueryInt(c, "per_page", 20, 100)
	from, fromErr := queryDate(c, "date_from", false)
	to, toErr := queryDate(c, "date_to", true)
	if err := validationOf(pageErr, perPageErr, fromErr, toErr); err != nil {
		return err
	}

	where := []string{"account_id = $1"}
	args := []any{authn.From(c).AccountID}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if s := c.QueryParam("status"); s != "" {
		add("status = $%d", s)
	}
	if s := c.QueryParam("to"); s != "" {
		// Each recipient on its own: a match never spans two of them.
		add("EXISTS (SELECT 1 FROM unnest(to_addresses) AS a WHERE a ILIKE '%%' || $%d || '%%')", escapeLike(s))
	}
	if !from.IsZero() {
		add("created_at >= $%d", from)
	}
	if !to.IsZero() {
		add("created_at < $%d", to)
	}
	cond := strings.Join(where, " AND ")
	ctx := c.Request().Context()

	var total int
	if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM emails WHERE "+cond, args...).Scan(&total); err != nil {
		return err
	}
	args = append(args, perPage, (page-1)*perPage)
	rows, err := r.pool.Query(ctx, fmt.Sprintf(`SELECT id, from_email, to_email, subject, status, attachment_count, created_at
		FROM emails WHERE %s ORDER BY created_at DESC, id DESC LIMIT $%d OFFSET $%d`, cond, len(args)-1, len(args)), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	items := []EmailListItem{}
	for rows.Next() {
		var e EmailListItem
		var created time.Time
		if err := rows.Scan(&e.ID, &e.FromEmail, &e.ToEmail, &e.Subject, &e.Status, &e.AttachmentCount, &created); err != nil {
			return err
		}
		e.CreatedAt = apitime.Of(created)
		items = append(items, e)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{
		"data": items,
		"pagination": Pagination{
			Page: page, PerPage: perPage, Total: total,
			TotalPages: (total + perPage - 1) / perPage,
		},
	})
}

// queryDate reads an ISO date (YYYY-MM-DD) or timestamp. A bare date_to
// includes its whole day.
func queryDate(c echo.Context, name string, endOfDay bool) (time.Time, *httpserver.FieldError) {
	s := c.QueryParam(name)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		if endOfDay {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if endOfDay {
			t = t.Add(time.Millisecond)
		}
		return t, nil
	}
	return time.Time{}, &httpserver.FieldError{Field: name, Message: "must be an ISO date (YYYY-MM-DD) or timestamp"}
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// EmailEvent is one entry of an email's timeline.
type EmailEvent struct {
	EventType  string          `json:"event_type"`
	Metadata   json.RawMessage `json:"metadata"`
	OccurredAt apitime.Time    `json:"occurred_at"`
}

// Email is the detail view of GET /v1/emails/:id.
type Email struct {
	ID                string          `json:"id"`
	FromEmail         string          `json:"from_email"`
	ToEmail           string          `json:"to_email"`
	Subject           string          `json:"subject"`
	Status            string          `json:"status"`
	ProviderMessageID *string         `json:"provider_message_id"`
	CreatedAt         apitime.Time    `json:"created_at"`
	SentAt            apitime.Time    `json:"sent_at"`
	DeliveredAt       apitime.Time    `json:"delivered_at"`
	OpenedAt          apitime.Time    `json:"opened_at"`
	ClickedAt         apitime.Time    `json:"clicked_at"`
	BouncedAt         apitime.Time    `json:"bounced_at"`
	Events            []EmailEvent    `json:"events"`
	Attachments       json.RawMessage `json:"attachments"`
}

func (r reader) getEmail(c echo.Context) error {
	ctx := c.Request().Context()
	var e Email
	// One snapshot for the row and its timeline: the status shown is never
	// older than the events listed.
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		e, err = emailView(ctx, tx, c.Param("id"), authn.From(c).AccountID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}

func emailView(ctx context.Context, tx pgx.Tx, id, accountID string) (Email, error) {
	var e Email
	var created time.Time
	var sent, delivered, opened, clicked, bounced *time.Time
	err := tx.QueryRow(ctx, `SELECT id, from_email, to_email, subject, status, provider_message_id, created_at,
			sent_at, delivered_at, opened_at, clicked_at, bounced_at, attachments
		FROM emails WHERE id = $1 AND account_id = $2`, id, accountID).
		Scan(&e.ID, &e.FromEmail, &e.ToEmail, &e.Subject, &e.Status, &e.ProviderMessageID, &created,
			&sent, &delivered, &opened, &clicked, &bounced, &e.Attachments)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, httpserver.NotFound("no such email")
	}
	if err != nil {
		return e, err
	}
	e.CreatedAt = apitime.Of(created)
	for _, f := range []struct {
		dst *apitime.Time
		src *time.Time
	}{{&e.SentAt, sent}, {&e.DeliveredAt, delivered}, {&e.OpenedAt, opened}, {&e.ClickedAt, clicked}, {&e.BouncedAt, bounced}} {
		if f.src != nil {
			*f.dst = apitime.Of(*f.src)
		}
	}
	rows, err := tx.Query(ctx, `SELECT event_type, metadata, occurred_at FROM email_events
		WHERE email_id = $1 ORDER BY occurred_at, position`, e.ID)
	if err != nil {
		return e, err
	}
	defer rows.Close()
	e.Events = []EmailEvent{}
	for rows.Next() {
		var ev EmailEvent
		var at time.Time
		if err := rows.Scan(&ev.EventType, &ev.Metadata, &at); err != nil {
			return e, err
		}
		ev.OccurredAt = apitime.Of(at)
		e.Events = append(e.Events, ev)
	}
	return e, rows.Err()
}
