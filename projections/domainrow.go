package projections

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/sendingdomain"
)

// DomainColumns are the columns of the domains table ScanDomain reads, in
// its order.
const DomainColumns = `id, account_id, name, region, mail_from_domain, dkim_mode, status, dkim_ok, mail_from_ok,
	active_selector, active_public_key, active_sealed_key, active_created_at, legacy_tokens,
	transition_kind, transition_state, transition_started_at, transition_cut_over_at, transition_old_key_retires_at,
	next_selector, next_public_key, next_sealed_key, next_created_at,
	old_selector, old_public_key, old_sealed_key, old_created_at,
	created_at, verification_deadline`

// keyColumns are the four columns of a key that may be absent.
type keyColumns struct {
	selector, publicKey, sealedKey *string
	createdAt                      *time.Time
}

func (k *keyColumns) dest() []any {
	return []any{&k.selector, &k.publicKey, &k.sealedKey, &k.createdAt}
}

// key is the key the columns hold, nil when they hold none.
func (k keyColumns) key() *sendingdomain.Key {
	if k.selector == nil {
		return nil
	}
	key := sendingdomain.Key{Selector: *k.selector}
	if k.publicKey != nil {
		key.PublicKey = *k.publicKey
	}
	if k.sealedKey != nil {
		key.SealedKey = *k.sealedKey
	}
	key.CreatedAt = utc(k.createdAt)
	return &key
}

// utc is t in UTC, the zero time when t is NULL.
func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// ScanDomain builds a domain from a row of DomainColumns: the one mapping
// from the table back to the domain, for the projector and the read side.
// LastCheck is not kept: only decisions use it, and they read the stream.
func ScanDomain(row pgx.CollectableRow) (sendingdomain.State, error) {
	var st sendingdomain.State
	var mode, status string
	var active, next, old keyColumns
	var kind, state *string
	var started, cutOver, retires *time.Time
	dest := []any{&st.ID, &st.AccountID, &st.Name, &st.Region, &st.MailFromDomain, &mode, &status, &st.DkimOK, &st.MailFromOK}
	dest = append(dest, active.dest()...)
	dest = append(dest, &st.LegacyTokens, &kind, &state, &started, &cutOver, &retires)
	dest = append(dest, next.dest()...)
	dest = append(dest, old.dest()...)
	dest = append(dest, &st.CreatedAt, &st.Deadline)
	if err := row.Scan(dest...); err != nil {
		return st, err
	}
	st.Mode, st.Status = sendingdomain.DkimMode(mode), sendingdomain.Status(status)
	st.Active = active.key()
	if len(st.LegacyTokens) == 0 {
		st.LegacyTokens = nil
	}
	if kind != nil {
		t := &sendingdomain.Transition{
			Kind: sendingdomain.TransitionKind(*kind), StartedAt: utc(started),
			CutOverAt: utc(cutOver), OldKeyRetiresAt: utc(retires), OldKey: old.key(),
		}
		if state != nil {
			t.State = *state
		}
		if k := next.key(); k != nil {
			t.Key = *k
		}
		st.Transition = t
	}
	st.CreatedAt, st.Deadline = st.CreatedAt.UTC(), st.Deadline.UTC()
	return st, nil
}
