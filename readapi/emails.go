package readapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"golang.org/x/text/unicode/norm"

	"github.com/mailroom/mailroom/internal/apitime"
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

// EmailFilter selects a page of an account's emails. Zero filter fields
// select everything.
type EmailFilter struct {
	Status string
	// To matches part of any one recipient, case-insensitively.
	To string
	// CreatedFrom (inclusive) and CreatedBefore (exclusive) bound the
	// creation time.
	CreatedFrom, CreatedBefore time.Time
	// Page counts from 1; PerPage emails make a page.
	Page, PerPage int
}

// EmailPage is a page of emails, newest first, and how many match in all.
type EmailPage struct {
	Emails []EmailListItem
	Total  int
}

// ListEmails reads a page of an account's emails.
func (r *Reader) ListEmails(ctx context.Context, accountID string, f EmailFilter) (EmailPage, error) {
	release, err := r.lists.Take(ctx, accountID)
	if err != nil {
		return EmailPage{Emails: []EmailListItem{}}, err
	}
	defer release()
	where := []string{"account_id = $1"}
	args := []any{accountID}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Status != "" {
		add("status = $%d", f.Status)
	}
	var mode []any
	if f.To != "" {
		to := norm.NFC.String(f.To) // as recipients are kept (mailmsg.Spellings)
		pattern := escapeLike(to)
		indexed, err := r.byTrigrams(ctx, to)
		if err != nil {
			return EmailPage{Emails: []EmailListItem{}}, err
		}
		if indexed {
			// The recipients' text, one a line: a pattern without a line
			// break matches it where it matches one recipient, and never
			// across two.
			add("email_recipients_text(to_addresses) ILIKE '%%' || $%d || '%%'", pattern)
			// Planned for its pattern each time (in one round trip all the
			// same): the plan PostgreSQL settles on for a prepared statement
			// is made for any pattern, and could read the whole index for
			// one that most emails of every account match, or pass it by
			// for one that few match.
			mode = []any{pgx.QueryExecModeExec}
		} else {
			// Each recipient on its own: a match never spans two of them.
			add("EXISTS (SELECT 1 FROM unnest(to_addresses) AS a WHERE a ILIKE '%%' || $%d || '%%')", pattern)
		}
	}
	if !f.CreatedFrom.IsZero() {
		add("created_at >= $%d", f.CreatedFrom)
	}
	if !f.CreatedBefore.IsZero() {
		add("created_at < $%d", f.CreatedBefore)
	}
	cond := strings.Join(where, " AND ")

	// One statement, so one snapshot: the total always agrees with the
	// page, even while emails arrive. The count's row stands alone when the
	// page is past the end, and then the page is not read at all (sorting
	// every email to skip them all would cost as much as the deepest page).
	args = append(args, f.PerPage, offsetOf(f.Page, f.PerPage))
	rows, err := r.pool.Query(ctx, fmt.Sprintf(`SELECT t.total, e.id, e.from_email, e.to_email, e.subject, e.status, e.attachment_count, e.created_at
		FROM (SELECT count(*) AS total FROM emails WHERE %[1]s) AS t
		LEFT JOIN LATERAL (SELECT id, from_email, to_email, subject, status, attachment_count, created_at
			FROM emails WHERE %[1]s AND $%[3]d < t.total ORDER BY created_at DESC, id DESC LIMIT $%[2]d OFFSET $%[3]d) AS e ON true
		ORDER BY e.created_at DESC, e.id DESC`, cond, len(args)-1, len(args)), append(mode, args...)...)
	page := EmailPage{Emails: []EmailListItem{}}
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e       EmailListItem
			id      *string
			count   *int
			created *time.Time
			atts    *int
		)
		var from, to, subject, status *string
		if err := rows.Scan(&count, &id, &from, &to, &subject, &status, &atts, &created); err != nil {
			return page, err
		}
		page.Total = *count
		if id == nil {
			continue // no email on this page
		}
		e.ID, e.FromEmail, e.ToEmail, e.Subject, e.Status = *id, *from, *to, *subject, *status
		e.AttachmentCount, e.CreatedAt = *atts, apitime.Of(*created)
		page.Emails = append(page.Emails, e)
	}
	return page, rows.Err()
}

// offsetOf is where page starts, saturating rather than overflowing for a
// page far past any end.
func offsetOf(page, perPage int) int64 {
	if int64(page-1) > math.MaxInt64/int64(perPage) {
		return math.MaxInt64
	}
	return int64(page-1) * int64(perPage)
}

// byTrigrams reports whether the to filter goes through the emails'
// trigram index for pattern: the index must be there (pg_trgm may be
// missing, see projections.Emails), and pattern must hold a trigram that
// pg_trgm looks up whatever the database's locale (three ASCII letters or
// digits in a row). Without one the index would be read whole, every
// account's emails; without the index the planner, knowing nothing of
// the recipients' text, would sort every email of the account for a page.
// Other patterns go through the account's emails, recipient by recipient.
func (r *Reader) byTrigrams(ctx context.Context, pattern string) (bool, error) {
	if !trigrams(pattern) || strings.Contains(pattern, "\n") {
		return false, nil
	}
	if r.recipientTrigrams.Load() {
		return true, nil // once there, it stays: a rebuild builds it again
	}
	var indexed bool
	if err := r.pool.QueryRow(ctx, "SELECT to_regclass('emails_to_trgm_idx') IS NOT NULL").Scan(&indexed); err != nil {
		return false, err
	}
	r.recipientTrigrams.Store(indexed)
	return indexed, nil
}

// trigrams reports whether pattern has three ASCII letters or digits in a
// row.
func trigrams(pattern string) bool {
	run := 0
	for _, c := range pattern {
		if c < utf8.RuneSelf && (unicode.IsLetter(c) || unicode.IsDigit(c)) {
			run++
			if run == 3 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
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

// Email reads an email of an account with its timeline; a *NotFoundError
// when the account has no such email.
func (r *Reader) Email(ctx context.Context, accountID, id string) (Email, error) {
	var e Email
	// One snapshot for the row and its timeline: the status shown is never
	// older than the events listed. The tables are locked first, as LOCK
	// takes no snapshot: a query's would be taken before it waits for a
	// rebuild's swap, and miss every row of the tables moved in.
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE emails, email_events IN ACCESS SHARE MODE"); err != nil {
			return err
		}
		var err error
		e, err = emailView(ctx, tx, id, accountID)
		return err
	})
	return e, err
}

func emailView(ctx context.Context, tx pgx.Tx, id, accountID string) (Email, error) {
	var e Email
	var created time.Time
	var sent, delivered, opened, clicked, bounced *time.Time
	// By id alone, the primary key: a plan PostgreSQL caches for the
	// statement while the table is small (and not yet analysed) could
	// otherwise walk every email of the account to find one. The account
	// is checked on the row.
	var owner string
	err := tx.QueryRow(ctx, `SELECT id, account_id, from_email, to_email, subject, status, provider_message_id, created_at,
			sent_at, delivered_at, opened_at, clicked_at, bounced_at, attachments
		FROM emails WHERE id = $1`, id).
		Scan(&e.ID, &owner, &e.FromEmail, &e.ToEmail, &e.Subject, &e.Status, &e.ProviderMessageID, &created,
			&sent, &delivered, &opened, &clicked, &bounced, &e.Attachments)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && owner != accountID) {
		return Email{}, &NotFoundError{Resource: "email"}
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
