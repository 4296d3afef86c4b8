// Package account is the tenant aggregate: every resource belongs to one
// account. The account stream also records the management tokens issued to
// operate it, and their revocation.
package account

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mailroom/mailroom/domain"
)

// Role is a management token's role on its account.
type Role string

const (
	RoleAdmin  Role = "org:admin"
	RoleMember Role = "org:member"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleMember }

// Status of an account.
type Status string

const (
	StatusActive    Status = "active"
	StatusSuspended Status = "suspended"
)

// Events.
type (
	Created struct {
		AccountID string    `json:"account_id"`
		Name      string    `json:"name"`
		CreatedAt time.Time `json:"created_at"`
	}
	Suspended struct {
		AccountID   string    `json:"account_id"`
		SuspendedAt time.Time `json:"suspended_at"`
	}
	Reinstated struct {
		AccountID    string    `json:"account_id"`
		ReinstatedAt time.Time `json:"reinstated_at"`
	}
	TokenIssued struct {
		AccountID string     `json:"account_id"`
		TokenID   string     `json:"token_id"`
		Role      Role       `json:"role"`
		TokenHash string     `json:"token_hash"`
		IssuedAt  time.Time  `json:"issued_at"`
		ExpiresAt *time.Time `json:"expires_at,omitempty"` // nil: never
	}
	TokenRevoked struct {
		AccountID string    `json:"account_id"`
		TokenID   string    `json:"token_id"`
		RevokedAt time.Time `json:"revoked_at"`
	}
	// RetentionSet: the account keeps its emails' content Days days; zero
	// goes back to the server's default.
	RetentionSet struct {
		AccountID string    `json:"account_id"`
		Days      int       `json:"days"`
		SetAt     time.Time `json:"set_at"`
	}
	// ErasureCompleted: every email of the account sent to one address was
	// erased on request. The address is kept only as its keyed hash, so the
	// record of the request does not bring it back. Recorded on the
	// address's ErasureStream (before that, on the account's stream).
	ErasureCompleted struct {
		AccountID   string    `json:"account_id"`
		ErasureID   string    `json:"erasure_id"`
		AddressKey  string    `json:"address_key"`
		EmailIDs    []string  `json:"email_ids"`
		CompletedAt time.Time `json:"completed_at"`
	}
)

func (*Created) EventType() string      { return "AccountCreated" }
func (*Suspended) EventType() string    { return "AccountSuspended" }
func (*Reinstated) EventType() string   { return "AccountReinstated" }
func (*TokenIssued) EventType() string  { return "ManagementTokenIssued" }
func (*TokenRevoked) EventType() string { return "ManagementTokenRevoked" }
func (*RetentionSet) EventType() string { return "AccountRetentionSet" }
func (*ErasureCompleted) EventType() string {
	return "AccountErasureCompleted"
}

// Events lists a fresh value of every event type of this aggregate, for
// decoding.
func Events() []domain.Event {
	return []domain.Event{&Created{}, &Suspended{}, &Reinstated{}, &TokenIssued{}, &TokenRevoked{}, &RetentionSet{}, &ErasureCompleted{}}
}

const streamPrefix = "account-"

// Stream is the account's stream name.
func Stream(id string) string { return streamPrefix + id }

// IDFromStream is the id of the account whose stream is stream; ok is false
// for a stream of anything else.
func IDFromStream(stream string) (id string, ok bool) { return strings.CutPrefix(stream, streamPrefix) }

// ErasureStream is the stream of accountID's erasure requests for the
// address whose keyed hash is addressKey. Each address has its own: on the
// account's stream, which every command on the account reads whole, each
// erasure would make the next one slower, and erasures of different
// addresses would contend for one stream.
func ErasureStream(accountID, addressKey string) string {
	return "erasure-" + accountID + "-" + addressKey
}

// Erasures is an address's erasure requests as their events left them.
type Erasures struct {
	// Last is the latest recorded, nil before any.
	Last *ErasureCompleted
}

// EvolveErasures applies one event of an ErasureStream.
func EvolveErasures(s Erasures, e domain.Event) Erasures {
	if e, ok := e.(*ErasureCompleted); ok {
		s.Last = e
	}
	return s
}

// State is the account as its events left it.
type State struct {
	ID     string
	Name   string
	Status Status
	// RetentionDays is how long the account keeps its emails' content;
	// zero means the server's default.
	RetentionDays int
	// tokens are the changes to issued tokens, newest first. A list that
	// states share, each adding to its front, keeps Evolve free of copies:
	// a map copied for each event made loading an account that had issued
	// thousands of tokens cost seconds.
	tokens *tokenChange
}

type tokenChange struct {
	id      string
	revoked bool
	next    *tokenChange
}

// Token reports whether token id was issued, and whether it is revoked.
func (s State) Token(id string) (revoked, issued bool) {
	for c := s.tokens; c != nil; c = c.next {
		if c.id == id {
			return c.revoked, true
		}
	}
	return false, false
}

// Exists reports whether the account was created.
func (s State) Exists() bool { return s.ID != "" }

// Evolve applies one event.
func Evolve(s State, e domain.Event) State {
	switch e := e.(type) {
	case *Created:
		s.ID, s.Name, s.Status = e.AccountID, e.Name, StatusActive
	case *Suspended:
		s.Status = StatusSuspended
	case *Reinstated:
		s.Status = StatusActive
	case *TokenIssued:
		s.tokens = &tokenChange{id: e.TokenID, next: s.tokens}
	case *TokenRevoked:
		s.tokens = &tokenChange{id: e.TokenID, revoked: true, next: s.tokens}
	case *RetentionSet:
		s.RetentionDays = e.Days
	}
	return s
}

// Create decides the creation of an account named name.
func Create(s State, id, name string, now time.Time) ([]domain.Event, error) {
	if s.Exists() {
		return nil, &domain.ConflictError{Code: "account_exists", Detail: "account already exists"}
	}
	name = strings.TrimSpace(name)
	var v domain.ValidationError
	if name == "" {
		v.Add("name", "is required")
	} else if n := utf8.RuneCountInString(name); n > 200 {
		v.Add("name", "must be at most 200 characters; got %d", n)
	} else {
		v.CheckLine("name", name)
	}
	if err := v.OrNil(); err != nil {
		return nil, err
	}
	return []domain.Event{&Created{AccountID: id, Name: name, CreatedAt: now}}, nil
}

// IssueToken decides issuing a management token whose secret hashes to
// hash. A zero expiresAt means the token never expires.
func IssueToken(s State, tokenID string, role Role, hash string, now, expiresAt time.Time) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.ErrNotFound
	}
	var v domain.ValidationError
	if !role.Valid() {
		v.Add("role", "must be org:admin or org:member")
	}
	if !expiresAt.IsZero() && !expiresAt.After(now) {
		v.Add("expires_at", "must be in the future")
	}
	if err := v.OrNil(); err != nil {
		return nil, err
	}
	e := &TokenIssued{AccountID: s.ID, TokenID: tokenID, Role: role, TokenHash: hash, IssuedAt: now}
	if !expiresAt.IsZero() {
		e.ExpiresAt = &expiresAt
	}
	return []domain.Event{e}, nil
}

// RevokeToken decides revoking one of the account's tokens. A token the
// account never issued is not found; revoking a revoked token decides
// nothing.
func RevokeToken(s State, tokenID string, now time.Time) ([]domain.Event, error) {
	revoked, issued := s.Token(tokenID)
	if !s.Exists() || !issued {
		return nil, domain.ErrNotFound
	}
	if revoked {
		return nil, nil
	}
	return []domain.Event{&TokenRevoked{AccountID: s.ID, TokenID: tokenID, RevokedAt: now}}, nil
}

// Suspend decides suspending the account; suspending a suspended account
// decides nothing.
func Suspend(s State, now time.Time) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.ErrNotFound
	}
	if s.Status == StatusSuspended {
		return nil, nil
	}
	return []domain.Event{&Suspended{AccountID: s.ID, SuspendedAt: now}}, nil
}

// Reinstate decides lifting a suspension; reinstating an active account
// decides nothing.
func Reinstate(s State, now time.Time) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.ErrNotFound
	}
	if s.Status == StatusActive {
		return nil, nil
	}
	return []domain.Event{&Reinstated{AccountID: s.ID, ReinstatedAt: now}}, nil
}

// Retention bounds, in days.
const (
	MinRetentionDays = 1
	MaxRetentionDays = 365
)

// SetRetention decides how many days the account keeps its emails'
// content; nil goes back to the server's default. Setting the current
// value decides nothing.
func SetRetention(s State, days *int, now time.Time) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.ErrNotFound
	}
	set := 0 // the server's default
	if days != nil {
		if *days < MinRetentionDays || *days > MaxRetentionDays {
			var v domain.ValidationError
			v.Add("retention_days", "must be between %d and %d, or null for the server's default", MinRetentionDays, MaxRetentionDays)
			return nil, &v
		}
		set = *days
	}
	if set == s.RetentionDays {
		return nil, nil
	}
	return []domain.Event{&RetentionSet{AccountID: s.ID, Days: set, SetAt: now}}, nil
}

// CompleteErasure decides recording an erasure request of accountID for the
// address whose keyed hash is addressKey, once its emails are erased.
func CompleteErasure(accountID, erasureID, addressKey string, emailIDs []string, now time.Time) ([]domain.Event, error) {
	return []domain.Event{&ErasureCompleted{AccountID: accountID, ErasureID: erasureID, AddressKey: addressKey, EmailIDs: emailIDs, CompletedAt: now}}, nil
}
