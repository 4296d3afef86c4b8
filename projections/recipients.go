package projections

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/mailmsg"
)

// queuedKeys are the keys of an email's recipients, as recorded or, for an
// email queued before they were, computed from its addresses. keyOf (JSON,
// "" when the keys were recorded) maps the digest of each computed address
// to its key, so that feedback recorded without keys finds them while the
// email's row is there.
func (p Emails) queuedKeys(q *email.Queued) (keys []string, keyOf string) {
	if len(q.RecipientKeys) > 0 || q.Erased {
		return nonNil(q.RecipientKeys), ""
	}
	all := slices.Concat(q.To, q.Cc, q.Bcc)
	keys = p.Keys.OfRecipients(q.AccountID, all)
	of := make(map[string]string, len(keys))
	for i, r := range all {
		of[digest(mailmsg.AddressOf(r))] = keys[i]
	}
	raw, _ := json.Marshal(of)
	return keys, string(raw)
}

// digest stands for an address in keyOf: the address is not kept.
func digest(address string) string {
	sum := sha256.Sum256([]byte(address))
	return hex.EncodeToString(sum[:])
}

// suppressed is one recipient a bounce or complaint suppresses: its key,
// or when the event has none, the digest that finds it in the email's
// keyOf; and its address, NULL once erased.
type suppressed struct {
	key, digest, address *string
}

// suppressedBy pairs an event's recipients with their keys.
func suppressedBy(recipients, keys []string) []suppressed {
	n := max(len(recipients), len(keys))
	out := make([]suppressed, n)
	for i := range n {
		if i < len(keys) {
			out[i].key = &keys[i]
		}
		if i < len(recipients) {
			a := mailmsg.AddressOf(recipients[i])
			out[i].address = &a
			if out[i].key == nil {
				d := digest(a)
				out[i].digest = &d
			}
		}
	}
	return out
}

// dayCounts is what one event adds to its account's day of
// email_daily_stats.
type dayCounts struct {
	emailID                                               string
	day                                                   string // YYYY-MM-DD, UTC
	sent, delivered, bounced, complained, opened, clicked int32
}

// countsOf is e's contribution to the daily stats, if it makes one.
func countsOf(e domain.Event) (dayCounts, bool) {
	on := func(id string, t time.Time) dayCounts {
		return dayCounts{emailID: id, day: t.UTC().Format(time.DateOnly)}
	}
	var c dayCounts
	switch e := e.(type) {
	case *email.Sent:
		c = on(e.EmailID, e.SentAt)
		c.sent = 1
	case *email.Delivered:
		c = on(e.EmailID, e.OccurredAt)
		c.delivered = 1
	case *email.Bounced:
		if !email.Permanent(e.BounceType) {
			return c, false
		}
		c = on(e.EmailID, e.OccurredAt)
		c.bounced = 1
	case *email.Complained:
		c = on(e.EmailID, e.OccurredAt)
		c.complained = 1
	case *email.Opened:
		c = on(e.EmailID, e.OccurredAt)
		c.opened = 1
	case *email.Clicked:
		c = on(e.EmailID, e.OccurredAt)
		c.clicked = 1
	default:
		return c, false
	}
	return c, true
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// dayCountRows are a batch's contributions to the daily stats: one per
// event whose email's account the batch does not know (addDayCounts finds
// it), and one per account and day for the others, summed here.
type dayCountRows struct {
	account                                               []pgtype.Text
	emailID, day                                          []string
	sent, delivered, bounced, complained, opened, clicked []int32
	byDay                                                 map[accountDay]int // row of each summed account and day
}

type accountDay struct{ account, day string }

// add adds c, whose email's account is account when known ("" if not).
func (r *dayCountRows) add(c dayCounts, account string) {
	if account != "" {
		k := accountDay{account, c.day}
		if i, ok := r.byDay[k]; ok {
			r.sent[i] += c.sent
			r.delivered[i] += c.delivered
			r.bounced[i] += c.bounced
			r.complained[i] += c.complained
			r.opened[i] += c.opened
			r.clicked[i] += c.clicked
			return
		}
		if r.byDay == nil {
			r.byDay = map[accountDay]int{}
		}
		r.byDay[k] = len(r.day)
		c.emailID = ""
	}
	r.account = append(r.account, pgtype.Text{String: account, Valid: account != ""})
	r.emailID = append(r.emailID, c.emailID)
	r.day = append(r.day, c.day)
	r.sent = append(r.sent, c.sent)
	r.delivered = append(r.delivered, c.delivered)
	r.bounced = append(r.bounced, c.bounced)
	r.complained = append(r.complained, c.complained)
	r.opened = append(r.opened, c.opened)
	r.clicked = append(r.clicked, c.clicked)
}

func (r *dayCountRows) args() []any {
	return []any{r.account, r.emailID, r.day, r.sent, r.delivered, r.bounced, r.complained, r.opened, r.clicked}
}
