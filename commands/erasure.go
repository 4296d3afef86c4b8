package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/mailmsg"
	"github.com/mailroom/mailroom/projections"
)

// SetRetention sets how many days the account keeps its emails' content;
// nil goes back to the server's default.
func (s *Service) SetRetention(ctx context.Context, accountID string, days *int, meta Meta) error {
	now := s.now()
	_, err := executeConfirmed(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.SetRetention(st, days, now)
	}, meta, projections.AccountsName)
	return err
}

// EraseEmail destroys one email's personal data, for reason (and the
// request erasureID, when on request): its bodies and attachments in blob
// storage first, then its data key, and last the EmailErased that takes it
// out of the read models. Each step may be repeated, so an erasure cut off
// half-way is finished by running it again. It reports whether this call
// recorded the erasure; an email erased already is not an error.
func (s *Service) EraseEmail(ctx context.Context, id, reason, erasureID string, meta Meta) (bool, error) {
	st, err := s.Email(ctx, id)
	if err != nil {
		return false, err
	}
	if !st.Exists() {
		return false, domain.ErrNotFound
	}
	accountID := st.Queued.AccountID
	if err := s.deleteContent(ctx, st); err != nil {
		return false, fmt.Errorf("erase email %s: %w", id, err)
	}
	if err := s.keys.Destroy(ctx, codec.KeyID(id), accountID); err != nil {
		return false, fmt.Errorf("erase email %s: %w", id, err)
	}
	now := s.now()
	evs, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.Erase(st, reason, erasureID, now)
	}, meta)
	return len(evs) > 0, err
}

// Erasure is what an erasure request erased.
type Erasure struct {
	ID        string
	AccountID string
	EmailIDs  []string
	CreatedAt time.Time
}

// ErasureRepeatWindow is how long a request to erase an address that finds
// nothing new is answered with the erasure of that address before it.
const ErasureRepeatWindow = 24 * time.Hour

// repeatedErasure answers a request that repeats the last one of its
// address: within ErasureRepeatWindow, and no email to erase that it did
// not erase (the read side may not show its erasures yet). A client
// retrying after a 503 thus learns what was erased, and the log records
// the request once. It waits, as the first did, until the erasure is
// visible.
func (s *Service) repeatedErasure(ctx context.Context, accountID, key string, ids []string, meta Meta) (Erasure, bool, error) {
	stream := account.ErasureStream(accountID, key)
	st, _, err := load(ctx, s, stream, account.EvolveErasures)
	if err != nil {
		return Erasure{}, false, err
	}
	er, ok := s.repeats(st, accountID, ids)
	if !ok {
		return Erasure{}, false, nil
	}
	_, err = executeConfirmed(ctx, s, stream, account.EvolveErasures, func(account.Erasures) ([]domain.Event, error) {
		return nil, nil
	}, meta, projections.EmailsName, projections.AccountsName)
	return er, true, err
}

// repeats is the address's last erasure when a request to erase it,
// finding ids, repeats it.
func (s *Service) repeats(st account.Erasures, accountID string, ids []string) (Erasure, bool) {
	last := st.Last
	if last == nil || s.now().Sub(last.CompletedAt) > ErasureRepeatWindow {
		return Erasure{}, false
	}
	for _, id := range ids {
		if !slices.Contains(last.EmailIDs, id) {
			return Erasure{}, false
		}
	}
	return Erasure{ID: last.ErasureID, AccountID: accountID, EmailIDs: last.EmailIDs, CreatedAt: last.CompletedAt}, true
}

// EraseRecipient erases every email of the account sent to address, as
// to, cc or bcc, whatever its age, and records the request with the
// address only as its keyed hash. A suppression of the address stays, by
// that hash.
func (s *Service) EraseRecipient(ctx context.Context, accountID, address string, meta Meta) (Erasure, error) {
	var v domain.ValidationError
	a, err := mailmsg.ParseAddress(strings.TrimSpace(address))
	switch {
	case strings.TrimSpace(address) == "":
		v.Add("email", "is required")
	case err != nil:
		v.Add("email", "%s", err.Error())
	case a.Name != "":
		v.Add("email", "must be the address alone, without a display name (%s)", a.Email)
	}
	if err := v.OrNil(); err != nil {
		return Erasure{}, err
	}
	if err := s.accountExists(ctx, accountID); err != nil {
		return Erasure{}, err
	}
	key := s.address.Of(accountID, a.Email)
	// The erasure goes on when the request ends first (a client's time-out
	// or the server's write deadline cut off a long one): stopped halfway it
	// would leave its emails erased under an erasure never recorded, and
	// a retry would record only the rest. A repeat meanwhile joins it.
	done := s.erasing.DoChan(accountID+"\x00"+key, func() (er any, err error) {
		defer func() { // it runs apart from the request, which recovers its own panics
			if r := recover(); r != nil {
				err = fmt.Errorf("erasure: panic: %v", r)
			}
		}()
		return s.eraseRecipient(context.WithoutCancel(ctx), accountID, key, meta)
	})
	select {
	case r := <-done:
		er, _ := r.Val.(Erasure)
		return er, r.Err
	case <-ctx.Done():
		return Erasure{}, ErrNotVisible
	}
}

// eraseRecipient is EraseRecipient's work, one at a time per address.
func (s *Service) eraseRecipient(ctx context.Context, accountID, key string, meta Meta) (Erasure, error) {
	ids, err := s.emailsSentTo(ctx, accountID, key)
	if err != nil {
		return Erasure{}, err
	}
	if er, ok, err := s.repeatedErasure(ctx, accountID, key, ids, meta); ok || err != nil {
		return er, err
	}
	er := Erasure{ID: uuid.Must(uuid.NewV7()).String(), AccountID: accountID, EmailIDs: ids}
	for _, id := range ids {
		if _, err := s.EraseEmail(ctx, id, email.ErasedOnRequest, er.ID, meta); err != nil {
			return Erasure{}, err
		}
	}
	er.CreatedAt = s.now() // dated when it is complete: after each email's erasure
	// Requests racing for one address each erase the emails (once: an
	// erased email records nothing more), but the first to record its
	// completion is the erasure; the others are answered with it.
	var first *Erasure
	_, err = executeConfirmed(ctx, s, account.ErasureStream(accountID, key), account.EvolveErasures, func(st account.Erasures) ([]domain.Event, error) {
		if prior, ok := s.repeats(st, accountID, ids); ok {
			first = &prior
			return nil, nil
		}
		first = nil
		return account.CompleteErasure(accountID, er.ID, key, ids, er.CreatedAt)
	}, meta, projections.EmailsName, projections.AccountsName) // the held list drops erased emails too
	if first != nil {
		return *first, err
	}
	return er, err
}

// accountExists is nil when the account was created, domain.ErrNotFound
// otherwise: its first event is enough.
func (s *Service) accountExists(ctx context.Context, accountID string) error {
	evs, err := s.store.ReadStream(ctx, account.Stream(accountID), 0, 1)
	switch {
	case errors.Is(err, eventstore.ErrStreamNotFound) || (err == nil && len(evs) == 0):
		return domain.ErrNotFound
	case err != nil:
		return err
	}
	return nil
}

// deleteContent deletes the email's bodies and attachments from blob
// storage. The body digests are kept in the clear; the attachments' are
// sealed with the rest of their metadata, which is why content goes
// before the key.
func (s *Service) deleteContent(ctx context.Context, st email.State) error {
	digests := contentOf(*st.Queued)
	for _, a := range st.Attachments() {
		if a.Digest != "" {
			digests = append(digests, blob.Digest(a.Digest))
		}
	}
	slices.Sort(digests) // inline attachments are listed again once scanned
	return s.content.Delete(ctx, slices.Compact(digests)...)
}
