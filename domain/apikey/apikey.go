// Package apikey is the API key aggregate: a scoped credential for the /v1
// routes. The secret itself never reaches an event; only its hash does.
package apikey

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mailroom/mailroom/domain"
)

// Permission is a scope a key may hold.
type Permission string

const (
	SendEmails Permission = "emails:send"
	ReadEmails Permission = "emails:read"
)

// MaxActive bounds an account's active keys, so that an account cannot
// multiply the per-credential rate limit with keys.
const MaxActive = 100

// AllPermissions is the default scope of a new key.
var AllPermissions = []Permission{SendEmails, ReadEmails}

// Events.
type (
	Created struct {
		KeyID       string       `json:"key_id"`
		AccountID   string       `json:"account_id"`
		Name        string       `json:"name"`
		Permissions []Permission `json:"permissions"`
		KeyHash     string       `json:"key_hash"`
		KeyPreview  string       `json:"key_preview"`
		CreatedAt   time.Time    `json:"created_at"`
	}
	Revoked struct {
		KeyID     string    `json:"key_id"`
		AccountID string    `json:"account_id"`
		RevokedAt time.Time `json:"revoked_at"`
	}
)

func (*Created) EventType() string { return "ApiKeyCreated" }
func (*Revoked) EventType() string { return "ApiKeyRevoked" }

// Events lists a fresh value of every event type of this aggregate.
func Events() []domain.Event { return []domain.Event{&Created{}, &Revoked{}} }

// Stream is the key's stream name.
func Stream(id string) string { return "apikey-" + id }

// State is the key as its events left it.
type State struct {
	ID        string
	AccountID string
	Active    bool
}

// Evolve applies one event.
func Evolve(s State, e domain.Event) State {
	switch e := e.(type) {
	case *Created:
		s.ID, s.AccountID, s.Active = e.KeyID, e.AccountID, true
	case *Revoked:
		s.Active = false
	}
	return s
}

// Secret is a freshly generated key: the full value shown once, and what may
// be kept of it.
type Secret struct {
	Hash    string
	Preview string
}

// Create decides a new key. permissions nil means the default scope.
func Create(s State, keyID, accountID, name string, permissions []string, secret Secret, now time.Time) ([]domain.Event, error) {
	if s.ID != "" {
		return nil, &domain.ConflictError{Code: "api_key_exists", Detail: "api key already exists"}
	}
	var v domain.ValidationError
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		v.Add("name", "is required")
	case utf8.RuneCountInString(name) > 100:
		v.Add("name", "must be at most 100 characters; got %d", utf8.RuneCountInString(name))
	default:
		v.CheckLine("name", name)
	}
	perms, unknown := parsePermissions(permissions)
	switch {
	case perms == nil && unknown < 0:
		v.Add("permissions", "must list at least one of emails:send and emails:read")
	case unknown >= 0:
		v.Add(fmt.Sprintf("permissions.%d", unknown), "unknown permission %q; known: emails:send, emails:read", permissions[unknown])
	}
	if err := v.OrNil(); err != nil {
		return nil, err
	}
	return []domain.Event{&Created{
		KeyID: keyID, AccountID: accountID, Name: name, Permissions: perms,
		KeyHash: secret.Hash, KeyPreview: secret.Preview, CreatedAt: now,
	}}, nil
}

// parsePermissions validates and de-duplicates, keeping the canonical
// order. It gives no permissions for an empty list, and the index of the
// first unknown one (-1 when there is none).
func parsePermissions(in []string) ([]Permission, int) {
	if in == nil {
		return append([]Permission(nil), AllPermissions...), -1
	}
	seen := map[Permission]bool{}
	for i, p := range in {
		perm := Permission(p)
		if perm != SendEmails && perm != ReadEmails {
			return nil, i
		}
		seen[perm] = true
	}
	var out []Permission
	for _, p := range AllPermissions {
		if seen[p] {
			out = append(out, p)
		}
	}
	return out, -1
}

// Revoke decides revoking the key on behalf of accountID. A key of another
// account is not found; revoking a revoked key decides nothing.
func Revoke(s State, accountID string, now time.Time) ([]domain.Event, error) {
	if s.ID == "" || s.AccountID != accountID {
		return nil, domain.ErrNotFound
	}
	if !s.Active {
		return nil, nil
	}
	return []domain.Event{&Revoked{KeyID: s.ID, AccountID: s.AccountID, RevokedAt: now}}, nil
}
