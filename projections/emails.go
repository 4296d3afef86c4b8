package projections

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/mailmsg"
)

// Emails projects the email list and detail views, the timeline, and the
// account suppression list, and each account's daily counts. Each row
// keeps the email's email.Progress (top_*, soft_bounced_at, reached_at),
// merged with maxima so that every arrival order gives the same row, and
// status is Progress.Status of it. An erased email leaves the emails and
// its timeline, and its suppressions lose their addresses but keep their
// keys; the daily counts stay.
type Emails struct {
	// Keys computes the address keys of emails and feedback recorded
	// before their events carried them.
	Keys datakeys.AddressKeys
}

func (Emails) Name() Name   { return EmailsName }
func (Emails) Version() int { return 7 } // 7: the to filter finds an address however its domain is written
func (Emails) Tables() []string {
	return []string{"emails", "email_events", "suppressions", "email_daily_stats"}
}

func (Emails) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS emails (
    id                  text PRIMARY KEY,
    account_id          text NOT NULL,
    from_email          text NOT NULL,
    to_email            text NOT NULL, -- the API's string: to_addresses joined by ", "
    to_addresses        text[] NOT NULL, -- for the list's to filter: searchable(to)
    subject             text NOT NULL,
    status              text NOT NULL,
    top_status          text NOT NULL,
    top_rank            integer NOT NULL,
    top_at              timestamptz NOT NULL,
    soft_bounced_at     timestamptz,
    reached_at          timestamptz,
    provider_message_id text,
    attachment_count    integer NOT NULL DEFAULT 0,
    attachments         jsonb NOT NULL DEFAULT '[]',
    created_at          timestamptz NOT NULL,
    sent_at             timestamptz,
    delivered_at        timestamptz,
    opened_at           timestamptz,
    clicked_at          timestamptz,
    bounced_at          timestamptz,
    recipient_keys      text[] NOT NULL DEFAULT '{}', -- the address keys of to, cc and bcc
    recipient_key_of    jsonb -- computed keys by address digest, for feedback recorded without keys
);
-- Keyed by email first: the timeline is read, and erased, by its email,
-- and one index serves that and each event's uniqueness.
CREATE TABLE IF NOT EXISTS email_events (
    email_id    text NOT NULL,
    event_id    uuid NOT NULL,
    event_type  text NOT NULL,
    metadata    jsonb NOT NULL,
    occurred_at timestamptz NOT NULL,
    position    numeric NOT NULL,
    PRIMARY KEY (email_id, event_id)
);
CREATE TABLE IF NOT EXISTS suppressions (
    account_id  text NOT NULL,
    address_key text NOT NULL,
    email       text, -- the address, lower case; NULL once its email is erased
    reason      text NOT NULL,
    email_id    text NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (account_id, address_key)
);
CREATE INDEX IF NOT EXISTS suppressions_email_idx ON suppressions (email_id);
CREATE TABLE IF NOT EXISTS email_daily_stats (
    account_id text NOT NULL,
    day        date NOT NULL, -- UTC
    sent       integer NOT NULL DEFAULT 0,
    delivered  integer NOT NULL DEFAULT 0,
    bounced    integer NOT NULL DEFAULT 0, -- permanent bounces
    complained integer NOT NULL DEFAULT 0,
    opened     integer NOT NULL DEFAULT 0,
    clicked    integer NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, day)
);`
}

// Indexes serve the list's filters, the search by recipient key and the
// search for emails past retention; nothing the projector writes looks
// them up.
func (Emails) Indexes(ext Extensions) []string {
	indexes := []string{
		`CREATE INDEX IF NOT EXISTS emails_account_created_idx ON emails (account_id, created_at DESC, id DESC)`,
		`CREATE INDEX IF NOT EXISTS emails_account_status_idx ON emails (account_id, status, created_at DESC)`,
		`CREATE INDEX IF NOT EXISTS emails_recipient_keys_idx ON emails USING gin (recipient_keys)`,
		`CREATE INDEX IF NOT EXISTS emails_created_idx ON emails (created_at, id)`,
	}
	// The trigrams of each email's recipients (the function is migration
	// 00009's), for the list's to filter, when the pg_trgm extension is
	// there (database.Migrate creates it when it may), naming its operator
	// class in whichever schema holds it. Without it there is no index, and
	// the filter reads every email of the account.
	if schema, ok := ext["pg_trgm"]; ok {
		trgm := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS emails_to_trgm_idx ON emails USING gin (email_recipients_text(to_addresses) %s.gin_trgm_ops)`,
			pgx.Identifier{schema}.Sanitize())
		indexes = append(indexes, trgm)
	}
	return indexes
}

// moveProgress merges one event's email.Effect into the row's Progress (top_*,
// soft_bounced_at, reached_at) and sets status to Progress.Status, in one
// write: $2..$4 the event's Mark (NULL when none), $5 when it reached the
// recipient, $6 when it bounced transiently, $7 and $8 the rank and name
// of bounced. Marks compare by (rank, time, name), as Mark.Above does.
const moveProgress = `WITH o AS (
		SELECT id, top_status, top_rank, top_at, reached_at, soft_bounced_at,
			$2::text IS NOT NULL AND (top_rank, top_at, top_status COLLATE "C") < ($3::integer, $4::timestamptz, $2::text COLLATE "C") AS up
		FROM emails WHERE id = $1
	), n AS (
		SELECT id,
			CASE WHEN up THEN $2 ELSE top_status END AS top_status,
			CASE WHEN up THEN $3 ELSE top_rank END AS top_rank,
			CASE WHEN up THEN $4 ELSE top_at END AS top_at,
			GREATEST(reached_at, $5::timestamptz) AS reached_at,
			GREATEST(soft_bounced_at, $6::timestamptz) AS soft_bounced_at
		FROM o
	)
	UPDATE emails e SET top_status = n.top_status, top_rank = n.top_rank, top_at = n.top_at,
		reached_at = n.reached_at, soft_bounced_at = n.soft_bounced_at,
		status = CASE
			WHEN n.soft_bounced_at IS NOT NULL AND (n.reached_at IS NULL OR n.reached_at <= n.soft_bounced_at)
				AND n.top_rank < $7::integer THEN $8
			ELSE n.top_status END
	FROM n WHERE e.id = n.id`

// Statements shared by Apply and ApplyBatch.
const (
	// addDayCounts adds counts to the day of each account ($1..$9: arrays
	// of account id, email id, day and the six counts). A row without its
	// account takes its email's, with one key probe.
	addDayCounts = `INSERT INTO email_daily_stats (account_id, day, sent, delivered, bounced, complained, opened, clicked)
		SELECT coalesce(c.account_id, e.account_id), c.day::date,
			sum(c.sent), sum(c.delivered), sum(c.bounced), sum(c.complained), sum(c.opened), sum(c.clicked)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::integer[], $7::integer[], $8::integer[], $9::integer[])
			AS c(account_id, email_id, day, sent, delivered, bounced, complained, opened, clicked)
		LEFT JOIN LATERAL (SELECT account_id FROM emails WHERE c.account_id IS NULL AND id = c.email_id OFFSET 0) e ON true
		WHERE coalesce(c.account_id, e.account_id) IS NOT NULL
		GROUP BY 1, 2
		ON CONFLICT (account_id, day) DO UPDATE SET sent = email_daily_stats.sent + excluded.sent,
			delivered = email_daily_stats.delivered + excluded.delivered, bounced = email_daily_stats.bounced + excluded.bounced,
			complained = email_daily_stats.complained + excluded.complained, opened = email_daily_stats.opened + excluded.opened,
			clicked = email_daily_stats.clicked + excluded.clicked`
	// eraseEmails removes the emails $1 and their timelines, and leaves
	// their suppressions only their keys.
	eraseEmails = `WITH e AS (DELETE FROM emails WHERE id = ANY($1::text[])),
		t AS (DELETE FROM email_events WHERE email_id = ANY($1::text[]))
		UPDATE suppressions SET email = NULL WHERE email_id = ANY($1::text[]) AND email IS NOT NULL`
)

func (p Emails) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	e, known, err := codec.DecodeKnown(ev)
	if err != nil || !known {
		return err
	}
	timeline := func(id, typ string, meta map[string]any, at time.Time) {
		if meta == nil {
			meta = map[string]any{}
		}
		raw, _ := json.Marshal(meta)
		b.Queue(`INSERT INTO email_events (event_id, email_id, event_type, metadata, occurred_at, position)
			VALUES ($1, $2, $3, $4, $5, $6::numeric * 1e19 + $7::numeric) ON CONFLICT (email_id, event_id) DO NOTHING`,
			ev.ID, id, typ, raw, at, int64(ev.Position.Commit), int64(ev.Position.Prepare))
	}
	// An event with an effect on the status moves the row's Progress and
	// the status with it.
	progress := func(id string) {
		ef, _ := email.EffectOf(e)
		var mark *string
		if ef.Mark.Status != "" {
			s := string(ef.Mark.Status)
			mark = &s
		}
		b.Queue(moveProgress, id, mark, email.Rank(ef.Mark.Status), ef.Mark.At, nullTime(ef.Reached), nullTime(ef.SoftBounce),
			email.Rank(email.StatusBounced), string(email.StatusBounced))
	}
	suppress := func(id string, recipients, keys []string, reason string, at time.Time) {
		for _, s := range suppressedBy(recipients, keys) {
			b.Queue(`INSERT INTO suppressions (account_id, address_key, email, reason, email_id, created_at)
				SELECT account_id, k.key, $4, $5, id, $6 FROM emails, coalesce($2, recipient_key_of ->> $3) AS k(key)
				WHERE id = $1 AND k.key IS NOT NULL
				ON CONFLICT (account_id, address_key) DO NOTHING`, id, s.key, s.digest, s.address, reason, at)
		}
	}
	if c, ok := countsOf(e); ok {
		var one dayCountRows
		one.add(c, "")
		b.Queue(addDayCounts, one.args()...)
	}
	switch e := e.(type) {
	case *email.Queued:
		atts, _ := json.Marshal(apiAttachments(e.Attachments))
		keys, keyOf := p.queuedKeys(e)
		b.Queue(`INSERT INTO emails (id, account_id, from_email, to_email, to_addresses, subject,
				status, top_status, top_rank, top_at, attachment_count, attachments, created_at, recipient_keys, recipient_key_of)
			VALUES ($1, $2, $3, $4, coalesce($5, '{}'::text[]), $6, $7, $7, $8, $9, $10, $11, $9, $12, $13::jsonb) ON CONFLICT (id) DO NOTHING`,
			e.EmailID, e.AccountID, e.From, strings.Join(e.To, ", "), searchable(e.To), e.Subject,
			string(email.StatusQueued), email.Rank(email.StatusQueued), e.QueuedAt, len(e.Attachments), atts,
			keys, nullText(keyOf))
	case *email.Scanned:
		atts, _ := json.Marshal(apiAttachments(e.Attachments))
		b.Queue(`UPDATE emails SET attachments = $2 WHERE id = $1`, e.EmailID, atts)
	case *email.Sent:
		progress(e.EmailID)
		b.Queue(`UPDATE emails SET provider_message_id = $2, sent_at = $3 WHERE id = $1`, e.EmailID, e.ProviderMessageID, e.SentAt)
		timeline(e.EmailID, "sent", map[string]any{"provider_message_id": e.ProviderMessageID}, e.SentAt)
	case *email.Failed:
		progress(e.EmailID)
		meta := map[string]any{"reason": e.Reason}
		if e.Detail != "" {
			meta["detail"] = e.Detail
		}
		timeline(e.EmailID, "failed", meta, e.FailedAt)
	case *email.Delivered:
		progress(e.EmailID)
		b.Queue(`UPDATE emails SET delivered_at = LEAST(coalesce(delivered_at, $2), $2) WHERE id = $1`, e.EmailID, e.OccurredAt)
		timeline(e.EmailID, "delivered", map[string]any{"recipients": listed(e.Recipients)}, e.OccurredAt)
	case *email.Bounced:
		progress(e.EmailID)
		b.Queue(`UPDATE emails SET bounced_at = LEAST(coalesce(bounced_at, $2), $2) WHERE id = $1`, e.EmailID, e.OccurredAt)
		timeline(e.EmailID, "bounced", map[string]any{"bounce_type": e.BounceType, "bounce_subtype": e.BounceSubtype, "recipients": listed(e.Recipients)}, e.OccurredAt)
		if email.Permanent(e.BounceType) {
			suppress(e.EmailID, e.Recipients, e.RecipientKeys, "bounce", e.OccurredAt)
		}
	case *email.Complained:
		progress(e.EmailID)
		meta := map[string]any{"recipients": listed(e.Recipients)}
		if e.FeedbackType != "" {
			meta["feedback_type"] = e.FeedbackType
		}
		timeline(e.EmailID, "complained", meta, e.OccurredAt)
		suppress(e.EmailID, e.Recipients, e.RecipientKeys, "complaint", e.OccurredAt)
	case *email.Opened:
		progress(e.EmailID)
		b.Queue(`UPDATE emails SET opened_at = LEAST(coalesce(opened_at, $2), $2) WHERE id = $1`, e.EmailID, e.OccurredAt)
		meta := map[string]any{}
		if e.UserAgent != "" {
			meta["user_agent"] = e.UserAgent
		}
		timeline(e.EmailID, "opened", meta, e.OccurredAt)
	case *email.Clicked:
		progress(e.EmailID)
		b.Queue(`UPDATE emails SET clicked_at = LEAST(coalesce(clicked_at, $2), $2) WHERE id = $1`, e.EmailID, e.OccurredAt)
		timeline(e.EmailID, "clicked", map[string]any{"link": e.Link}, e.OccurredAt)
	case *email.Erased:
		b.Queue(eraseEmails, []string{e.EmailID})
	}
	return nil
}

// attachmentView is the API's attachment metadata.
type attachmentView struct {
	Filename    string  `json:"filename"`
	ContentType string  `json:"content_type"`
	ContentID   *string `json:"content_id"`
	SizeBytes   int64   `json:"size_bytes"`
}

func apiAttachments(in []email.Attachment) []attachmentView {
	out := make([]attachmentView, len(in))
	for i, a := range in {
		out[i] = attachmentView{Filename: a.Filename, ContentType: a.ContentType, SizeBytes: a.SizeBytes}
		if a.ContentID != "" {
			cid := a.ContentID
			out[i].ContentID = &cid
		}
	}
	return out
}

// nullText is s, or NULL when empty.
func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullTime is t, or NULL when zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// listed is a list for the timeline's JSON: none is [], not null.
func listed(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// searchable is what the list's to filter searches of an email's
// recipients: each as given, in composed form, and its address in its
// domain's other spellings (mailmsg.Spellings), one a line in the index.
func searchable(to []string) []string {
	out := make([]string, 0, len(to))
	for _, r := range to {
		out = append(out, mailmsg.Spellings(r)...)
	}
	return out
}
