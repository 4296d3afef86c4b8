package projections

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// emailFold is what one batch's events do to one email row.
type emailFold struct {
	id          string
	queued      *email.Queued  // queued in this batch: the row is inserted
	keys        []string       // the queued email's recipient keys
	keyOf       string         // and their digests, when computed (queuedKeys)
	moved       email.Progress // the status effects of the other events
	attachments *string        // the latest scan's metadata (JSON)
	sent        *email.Sent    // the latest
	delivered   time.Time      // the earliest of each kind of feedback
	opened      time.Time
	clicked     time.Time
	bounced     time.Time
}

// earliest keeps the earlier of *t and at (zero is none).
func earliest(t *time.Time, at time.Time) {
	if t.IsZero() || at.Before(*t) {
		*t = at
	}
}

// micro is t as PostgreSQL stores it, so that Go compares marks as the SQL
// of Apply does.
func micro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// ApplyBatch writes each touched email row once: the batch's events are
// folded per email in Go (maxima of email.Progress, earliest feedback
// times, latest scan and send), emails queued in the batch are inserted
// whole, and the others are merged into their rows by one UPDATE, as
// Apply's statements would merge them event by event. Timeline,
// suppression and daily count rows go in with one statement each, and
// emails erased in the batch leave last, as they leave Apply's tables
// once their last event is applied.
func (p Emails) ApplyBatch(events []eventstore.RecordedEvent, b *pgx.Batch) error {
	folds := map[string]*emailFold{}
	var order []*emailFold
	fold := func(id string) *emailFold {
		f := folds[id]
		if f == nil {
			f = &emailFold{id: id}
			folds[id] = f
			order = append(order, f)
		}
		return f
	}
	var tl timelineRows
	var sup suppressionRows
	var counts dayCountRows
	var erased []string
	for _, ev := range events {
		e, known, err := codec.DecodeKnown(ev)
		if err != nil {
			return err
		}
		if !known {
			continue
		}
		progress := func(f *emailFold) {
			ef, _ := email.EffectOf(e)
			ef.Mark.At, ef.Reached, ef.SoftBounce = micro(ef.Mark.At), micro(ef.Reached), micro(ef.SoftBounce)
			f.moved = f.moved.With(ef)
		}
		if c, ok := countsOf(e); ok {
			// An email queued earlier in the batch names its account.
			var account string
			if f := folds[c.emailID]; f != nil && f.queued != nil {
				account = f.queued.AccountID
			}
			counts.add(c, account)
		}
		switch e := e.(type) {
		case *email.Queued:
			if f := fold(e.EmailID); f.queued == nil {
				f.queued = e
				f.keys, f.keyOf = p.queuedKeys(e)
			}
		case *email.Scanned:
			atts, _ := json.Marshal(apiAttachments(e.Attachments))
			s := string(atts)
			fold(e.EmailID).attachments = &s
		case *email.Sent:
			f := fold(e.EmailID)
			progress(f)
			f.sent = e
			tl.add(ev, e.EmailID, "sent", object().str("provider_message_id", e.ProviderMessageID).end(), e.SentAt)
		case *email.Failed:
			progress(fold(e.EmailID))
			meta := object().str("reason", e.Reason)
			if e.Detail != "" {
				meta = meta.str("detail", e.Detail)
			}
			tl.add(ev, e.EmailID, "failed", meta.end(), e.FailedAt)
		case *email.Delivered:
			f := fold(e.EmailID)
			progress(f)
			earliest(&f.delivered, e.OccurredAt)
			tl.add(ev, e.EmailID, "delivered", object().strs("recipients", e.Recipients).end(), e.OccurredAt)
		case *email.Bounced:
			f := fold(e.EmailID)
			progress(f)
			earliest(&f.bounced, e.OccurredAt)
			tl.add(ev, e.EmailID, "bounced", object().str("bounce_type", e.BounceType).str("bounce_subtype", e.BounceSubtype).strs("recipients", e.Recipients).end(), e.OccurredAt)
			if email.Permanent(e.BounceType) {
				sup.add(e.EmailID, suppressedBy(e.Recipients, e.RecipientKeys), "bounce", e.OccurredAt)
			}
		case *email.Complained:
			progress(fold(e.EmailID))
			meta := object().strs("recipients", e.Recipients)
			if e.FeedbackType != "" {
				meta = meta.str("feedback_type", e.FeedbackType)
			}
			tl.add(ev, e.EmailID, "complained", meta.end(), e.OccurredAt)
			sup.add(e.EmailID, suppressedBy(e.Recipients, e.RecipientKeys), "complaint", e.OccurredAt)
		case *email.Opened:
			f := fold(e.EmailID)
			progress(f)
			earliest(&f.opened, e.OccurredAt)
			meta := object()
			if e.UserAgent != "" {
				meta = meta.str("user_agent", e.UserAgent)
			}
			tl.add(ev, e.EmailID, "opened", meta.end(), e.OccurredAt)
		case *email.Clicked:
			f := fold(e.EmailID)
			progress(f)
			earliest(&f.clicked, e.OccurredAt)
			tl.add(ev, e.EmailID, "clicked", object().str("link", e.Link).end(), e.OccurredAt)
		case *email.Erased:
			erased = append(erased, e.EmailID)
		}
	}
	if len(order) > 0 {
		var ins emailInserts
		var upd emailUpdates
		for _, f := range order {
			if f.queued != nil {
				if err := ins.add(f); err != nil {
					return fmt.Errorf("email %s: %w", f.id, err)
				}
			}
			// Also for an email queued here: the insert gives way to a row
			// already there, which the update then merges into, as Apply's
			// statements would.
			upd.add(f)
		}
		b.Queue(upsertEmails, append(append(ins.args(), upd.args()...), ins.keys, ins.keyOf)...)
	}
	if len(tl.eventID) > 0 {
		b.Queue(insertTimeline, tl.eventID, tl.emailID, tl.typ, tl.meta, tl.at, tl.commit, tl.prepare)
	}
	if len(sup.emailID) > 0 {
		b.Queue(insertSuppressions, sup.emailID, sup.key, sup.digest, sup.address, sup.reason, sup.at)
	}
	if len(counts.emailID) > 0 {
		b.Queue(addDayCounts, counts.args()...)
	}
	if len(erased) > 0 {
		b.Queue(eraseEmails, erased)
	}
	return nil
}

// upsertEmails inserts the emails queued in the batch ($1..$21 and
// $38..$39, whole rows) and merges the batch's effects into rows that were there before
// ($22..$37): the inserted rows are invisible to the UPDATE (one snapshot),
// so no row is written twice. Rows already there are passed over by a
// probe of the key rather than ON CONFLICT, whose speculative insertion
// costs more; the projector's lock (or a rebuild's own shadow tables)
// makes it the only writer. The merge is Apply's moveProgress and column
// updates, with the batch's folded effect standing for its events.
const upsertEmails = `WITH ins AS (
		INSERT INTO emails (id, account_id, from_email, to_email, to_addresses, subject, status, top_status, top_rank, top_at,
			soft_bounced_at, reached_at, provider_message_id, attachment_count, attachments, created_at,
			sent_at, delivered_at, opened_at, clicked_at, bounced_at, recipient_keys, recipient_key_of)
		SELECT id, account_id, from_email, to_email, ARRAY(SELECT jsonb_array_elements_text(to_addresses::jsonb)), subject,
			status, top_status, top_rank, top_at, soft_bounced_at, reached_at, provider_message_id, attachment_count,
			attachments::jsonb, created_at, sent_at, delivered_at, opened_at, clicked_at, bounced_at,
			ARRAY(SELECT jsonb_array_elements_text(recipient_keys::jsonb)), recipient_key_of::jsonb
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::integer[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[], $13::text[], $14::integer[], $15::text[],
			$16::timestamptz[], $17::timestamptz[], $18::timestamptz[], $19::timestamptz[], $20::timestamptz[], $21::timestamptz[],
			$38::text[], $39::text[])
			AS n(id, account_id, from_email, to_email, to_addresses, subject, status, top_status, top_rank, top_at,
				soft_bounced_at, reached_at, provider_message_id, attachment_count, attachments, created_at,
				sent_at, delivered_at, opened_at, clicked_at, bounced_at, recipient_keys, recipient_key_of)
		WHERE NOT EXISTS (SELECT 1 FROM emails e WHERE e.id = n.id OFFSET 0)
	), d AS (
		SELECT * FROM unnest($22::text[], $23::text[], $24::integer[], $25::timestamptz[], $26::timestamptz[], $27::timestamptz[],
			$28::text[], $29::boolean[], $30::text[], $31::timestamptz[], $32::timestamptz[], $33::timestamptz[], $34::timestamptz[], $35::timestamptz[])
			AS d(id, mark_status, mark_rank, mark_at, reached, soft, attachments, sent, provider_message_id, sent_at,
				delivered_at, opened_at, clicked_at, bounced_at)
	), o AS (
		SELECT d.*, e.row, e.top_status AS old_status, e.top_rank AS old_rank, e.top_at AS old_at,
			e.reached_at AS old_reached, e.soft_bounced_at AS old_soft,
			d.mark_status IS NOT NULL AND (e.top_rank, e.top_at, e.top_status COLLATE "C") < (d.mark_rank, d.mark_at, d.mark_status COLLATE "C") AS up
		-- One index probe per email (OFFSET 0 keeps the subquery apart):
		-- a hash join would read the whole table for every batch.
		FROM d CROSS JOIN LATERAL (SELECT ctid AS row, * FROM emails WHERE id = d.id OFFSET 0) e
	), n AS (
		SELECT o.*,
			CASE WHEN up THEN mark_status ELSE old_status END AS top_status,
			CASE WHEN up THEN mark_rank ELSE old_rank END AS top_rank,
			CASE WHEN up THEN mark_at ELSE old_at END AS top_at,
			GREATEST(old_reached, reached) AS reached_at,
			GREATEST(old_soft, soft) AS soft_bounced_at
		FROM o
	)
	UPDATE emails e SET top_status = n.top_status, top_rank = n.top_rank, top_at = n.top_at,
		reached_at = n.reached_at, soft_bounced_at = n.soft_bounced_at,
		status = CASE
			WHEN n.soft_bounced_at IS NOT NULL AND (n.reached_at IS NULL OR n.reached_at <= n.soft_bounced_at)
				AND n.top_rank < $36::integer THEN $37
			ELSE n.top_status END,
		attachments = coalesce(n.attachments::jsonb, e.attachments),
		provider_message_id = CASE WHEN n.sent THEN n.provider_message_id ELSE e.provider_message_id END,
		sent_at = CASE WHEN n.sent THEN n.sent_at ELSE e.sent_at END,
		delivered_at = LEAST(e.delivered_at, n.delivered_at),
		opened_at = LEAST(e.opened_at, n.opened_at),
		clicked_at = LEAST(e.clicked_at, n.clicked_at),
		bounced_at = LEAST(e.bounced_at, n.bounced_at)
	FROM n WHERE e.ctid = n.row`

// emailInserts are the columns of the rows of emails queued in a batch.
type emailInserts struct {
	id, account, from, to, toAddresses, subject, status, topStatus []string
	topRank                                                        []int32
	topAt                                                          []time.Time
	soft, reached                                                  []pgtype.Timestamptz
	providerMessageID                                              []pgtype.Text
	attachmentCount                                                []int32
	attachments                                                    []string
	created                                                        []time.Time
	sent, delivered, opened, clicked, bounced                      []pgtype.Timestamptz
	keys                                                           []string // JSON arrays
	keyOf                                                          []pgtype.Text
}

func (c *emailInserts) add(f *emailFold) error {
	q := f.queued
	toJSON, err := json.Marshal(searchable(q.To))
	if err != nil {
		return err
	}
	var atts string
	if f.attachments != nil {
		atts = *f.attachments
	} else {
		raw, _ := json.Marshal(apiAttachments(q.Attachments))
		atts = string(raw)
	}
	p := email.Progress{}.With(email.Effect{Mark: email.Mark{Status: email.StatusQueued, At: micro(q.QueuedAt)}}).With(f.moved.Effect())
	st := p.Status()
	c.id = append(c.id, q.EmailID)
	c.account = append(c.account, q.AccountID)
	c.from = append(c.from, q.From)
	c.to = append(c.to, strings.Join(q.To, ", "))
	c.toAddresses = append(c.toAddresses, string(toJSON))
	c.subject = append(c.subject, q.Subject)
	c.status = append(c.status, string(st.Status))
	c.topStatus = append(c.topStatus, string(p.Top.Status))
	c.topRank = append(c.topRank, int32(email.Rank(p.Top.Status)))
	c.topAt = append(c.topAt, p.Top.At)
	c.soft = append(c.soft, stamp(p.SoftBounce))
	c.reached = append(c.reached, stamp(p.Reached))
	var pmid pgtype.Text
	var sent pgtype.Timestamptz
	if f.sent != nil {
		pmid, sent = text(f.sent.ProviderMessageID), stamp(f.sent.SentAt)
	}
	c.providerMessageID = append(c.providerMessageID, pmid)
	c.attachmentCount = append(c.attachmentCount, int32(len(q.Attachments)))
	c.attachments = append(c.attachments, atts)
	c.created = append(c.created, q.QueuedAt)
	c.sent = append(c.sent, sent)
	c.delivered = append(c.delivered, stamp(f.delivered))
	c.opened = append(c.opened, stamp(f.opened))
	c.clicked = append(c.clicked, stamp(f.clicked))
	c.bounced = append(c.bounced, stamp(f.bounced))
	keys, err := json.Marshal(nonNil(f.keys))
	if err != nil {
		return err
	}
	c.keys = append(c.keys, string(keys))
	var keyOf pgtype.Text
	if f.keyOf != "" {
		keyOf = text(f.keyOf)
	}
	c.keyOf = append(c.keyOf, keyOf)
	return nil
}

func (c *emailInserts) args() []any {
	return []any{c.id, c.account, c.from, c.to, c.toAddresses, c.subject, c.status, c.topStatus, c.topRank, c.topAt,
		c.soft, c.reached, c.providerMessageID, c.attachmentCount, c.attachments, c.created,
		c.sent, c.delivered, c.opened, c.clicked, c.bounced}
}

// emailUpdates are a batch's folded effects on email rows already there.
type emailUpdates struct {
	id                                          []string
	markStatus                                  []pgtype.Text
	markRank                                    []int32
	markAt, reached, soft                       []pgtype.Timestamptz
	attachments                                 []pgtype.Text
	sent                                        []bool
	providerMessageID                           []pgtype.Text
	sentAt, delivered, opened, clicked, bounced []pgtype.Timestamptz
}

func (c *emailUpdates) add(f *emailFold) {
	var mark pgtype.Text
	if f.moved.Top.Status != "" {
		mark = text(string(f.moved.Top.Status))
	}
	var pmid pgtype.Text
	var sentAt pgtype.Timestamptz
	if f.sent != nil {
		pmid, sentAt = text(f.sent.ProviderMessageID), stamp(f.sent.SentAt)
	}
	c.id = append(c.id, f.id)
	c.markStatus = append(c.markStatus, mark)
	c.markRank = append(c.markRank, int32(email.Rank(f.moved.Top.Status)))
	c.markAt = append(c.markAt, stamp(f.moved.Top.At))
	c.reached = append(c.reached, stamp(f.moved.Reached))
	c.soft = append(c.soft, stamp(f.moved.SoftBounce))
	var atts pgtype.Text
	if f.attachments != nil {
		atts = text(*f.attachments)
	}
	c.attachments = append(c.attachments, atts)
	c.sent = append(c.sent, f.sent != nil)
	c.providerMessageID = append(c.providerMessageID, pmid)
	c.sentAt = append(c.sentAt, sentAt)
	c.delivered = append(c.delivered, stamp(f.delivered))
	c.opened = append(c.opened, stamp(f.opened))
	c.clicked = append(c.clicked, stamp(f.clicked))
	c.bounced = append(c.bounced, stamp(f.bounced))
}

func (c *emailUpdates) args() []any {
	return []any{c.id, c.markStatus, c.markRank, c.markAt, c.reached, c.soft, c.attachments, c.sent, c.providerMessageID,
		c.sentAt, c.delivered, c.opened, c.clicked, c.bounced,
		email.Rank(email.StatusBounced), string(email.StatusBounced)}
}

// stamp is t for a nullable timestamptz column: NULL when zero. Typed
// values spare pgx encoding a slice of pointers by reflection.
func stamp(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()} }

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: true} }

// timelineRows are a batch's email_events rows.
type timelineRows struct {
	eventID, emailID, typ, meta []string
	at                          []time.Time
	commit, prepare             []int64
}

func (t *timelineRows) add(ev eventstore.RecordedEvent, id, typ, meta string, at time.Time) {
	t.eventID = append(t.eventID, ev.ID.String())
	t.emailID = append(t.emailID, id)
	t.typ = append(t.typ, typ)
	t.meta = append(t.meta, meta)
	t.at = append(t.at, at)
	t.commit = append(t.commit, int64(ev.Position.Commit))
	t.prepare = append(t.prepare, int64(ev.Position.Prepare))
}

// jsonObject writes a timeline row's metadata straight to JSON: what
// json.Marshal of a map holds, without reflection. jsonb keeps neither key
// order nor escapes, so the stored value is the same.
type jsonObject []byte

func object() jsonObject { return jsonObject{'{'} }

func (o jsonObject) key(k string) jsonObject {
	if len(o) > 1 {
		o = append(o, ',')
	}
	o = appendJSONString(o, k)
	return append(o, ':')
}

func (o jsonObject) str(k, v string) jsonObject { return appendJSONString(o.key(k), v) }

// strs writes v as an array; none is an empty list, as the row path
// writes it (never null).
func (o jsonObject) strs(k string, v []string) jsonObject {
	o = o.key(k)
	o = append(o, '[')
	for i, s := range v {
		if i > 0 {
			o = append(o, ',')
		}
		o = appendJSONString(o, s)
	}
	return append(o, ']')
}

func (o jsonObject) end() string { return string(append(o, '}')) }

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD, as with json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// insertTimeline passes over rows already there, as upsertEmails does.
const insertTimeline = `INSERT INTO email_events (event_id, email_id, event_type, metadata, occurred_at, position)
	SELECT event_id, email_id, event_type, metadata::jsonb, occurred_at, c::numeric * 1e19 + p::numeric
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::bigint[])
		AS t(event_id, email_id, event_type, metadata, occurred_at, c, p)
	WHERE NOT EXISTS (SELECT 1 FROM email_events e WHERE e.email_id = t.email_id AND e.event_id = t.event_id OFFSET 0)`

// suppressionRows are a batch's suppressions, in event order: the first
// for an address key wins, as with Apply.
type suppressionRows struct {
	emailID, reason      []string
	key, digest, address []pgtype.Text
	at                   []time.Time
}

func (s *suppressionRows) add(id string, recipients []suppressed, reason string, at time.Time) {
	for _, r := range recipients {
		s.emailID = append(s.emailID, id)
		s.key = append(s.key, maybe(r.key))
		s.digest = append(s.digest, maybe(r.digest))
		s.address = append(s.address, maybe(r.address))
		s.reason = append(s.reason, reason)
		s.at = append(s.at, at)
	}
}

func maybe(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return text(*s)
}

// insertSuppressions takes a recipient's key from the event or, for
// feedback recorded without keys, from its email's computed keys.
const insertSuppressions = `INSERT INTO suppressions (account_id, address_key, email, reason, email_id, created_at)
	SELECT e.account_id, e.key, s.address, s.reason, e.id, s.at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
		WITH ORDINALITY AS s(email_id, key, digest, address, reason, at, n)
	CROSS JOIN LATERAL (SELECT id, account_id, coalesce(s.key, recipient_key_of ->> s.digest) AS key
		FROM emails WHERE id = s.email_id OFFSET 0) e -- a key probe each
	WHERE e.key IS NOT NULL
	ORDER BY s.n
	ON CONFLICT (account_id, address_key) DO NOTHING`
