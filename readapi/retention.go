package readapi

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Account is an account as the read model holds it.
type Account struct {
	ID        string
	Name      string
	Status    string
	CreatedAt time.Time
	// RetentionDays is how long the account keeps its emails' content;
	// nil means the server's default.
	RetentionDays *int
}

// Account reads an account; a *NotFoundError when there is none.
func (r *Reader) Account(ctx context.Context, accountID string) (Account, error) {
	rows, err := r.pool.Query(ctx, `SELECT id, name, status, created_at, retention_days FROM accounts WHERE id = $1`, accountID)
	if err != nil {
		return Account{}, err
	}
	a, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Account])
	if errors.Is(err, pgx.ErrNoRows) {
		return a, &NotFoundError{Resource: "account"}
	}
	return a, err
}

// EmailsSentTo lists the emails of an account, of every status, sent to
// the address whose key is addressKey, by id.
func (r *Reader) EmailsSentTo(ctx context.Context, accountID, addressKey string) ([]string, error) {
	rows, err := r.pool.Query(ctx, `SELECT id FROM emails WHERE account_id = $1 AND recipient_keys @> ARRAY[$2::text] ORDER BY id`,
		accountID, addressKey)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ExpiredEmail is an email kept longer than its account's retention.
type ExpiredEmail struct {
	EmailID   string
	AccountID string
	CreatedAt time.Time
}

// EmailsPastRetention lists up to limit emails created longer ago than
// their account's retention (defaultDays for an account without its own)
// before now, oldest first, after the email after (from the start when
// it is nil).
func (r *Reader) EmailsPastRetention(ctx context.Context, defaultDays int, now time.Time, after *ExpiredEmail, limit int) ([]ExpiredEmail, error) {
	var afterAt *time.Time
	var afterID string
	if after != nil {
		afterAt, afterID = &after.CreatedAt, after.EmailID
	}
	rows, err := r.pool.Query(ctx, `SELECT e.id, e.account_id, e.created_at FROM emails e
		LEFT JOIN accounts a ON a.id = e.account_id
		WHERE e.created_at < $2::timestamptz - make_interval(days => coalesce(a.retention_days, $1::integer))
			AND ($4::timestamptz IS NULL OR (e.created_at, e.id) > ($4, $5))
		ORDER BY e.created_at, e.id LIMIT $3`, defaultDays, now, limit, afterAt, afterID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[ExpiredEmail])
}

// DayStats are an account's counts of one UTC day: events, not emails
// (an email opened twice counts two opens); bounced counts permanent
// bounces only.
type DayStats struct {
	Date       string `json:"date"` // YYYY-MM-DD
	Sent       int    `json:"sent"`
	Delivered  int    `json:"delivered"`
	Bounced    int    `json:"bounced"`
	Complained int    `json:"complained"`
	Opened     int    `json:"opened"`
	Clicked    int    `json:"clicked"`
}

// DailyStats reads an account's counts of every day from from to to (both
// included, as UTC dates), oldest first; a day without events counts zeros.
// The days are counted as dates, not as timestamps a day apart, which skip
// a day where the session's time zone has no midnight (a DST change).
func (r *Reader) DailyStats(ctx context.Context, accountID string, from, to time.Time) ([]DayStats, error) {
	rows, err := r.pool.Query(ctx, `SELECT to_char(d.day, 'YYYY-MM-DD'), coalesce(s.sent, 0), coalesce(s.delivered, 0),
			coalesce(s.bounced, 0), coalesce(s.complained, 0), coalesce(s.opened, 0), coalesce(s.clicked, 0)
		FROM (SELECT $2::date + i FROM generate_series(0, $3::date - $2::date) AS i) AS d(day)
		LEFT JOIN email_daily_stats s ON s.account_id = $1 AND s.day = d.day
		ORDER BY d.day`, accountID, from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[DayStats])
}
