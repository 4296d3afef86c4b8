// Package sandbox is the provider that delivers nothing outside: it records
// what it is asked to do so a developer (or a test) can look.
package sandbox

import (
	"context"
	"crypto/rsa"
	"fmt"
	"sync"

	"github.com/mailroom/mailroom/internal/provider"
)

// Call is one identity call the recorder carried out (refused calls are
// not recorded).
type Call struct {
	Op       string // "create", "set_signing_key", "delete"
	Domain   string
	Selector string
}

// Identities records identity calls in memory, and keeps each identity's
// owner as a provider would.
type Identities struct {
	mu    sync.Mutex
	calls []Call
	live  map[string]provider.Identity
}

// NewIdentities returns an empty recorder.
func NewIdentities() *Identities { return &Identities{live: map[string]provider.Identity{}} }

var _ provider.Identities = (*Identities)(nil)

// owned refuses a call of domainID on an identity another domain owns.
// The caller holds s.mu.
func (s *Identities) owned(domainID, domain string) error {
	if id, ok := s.live[domain]; ok && id.DomainID != "" && id.DomainID != domainID {
		return fmt.Errorf("sandbox: %s: %w", domain, provider.ErrNotOwner)
	}
	return nil
}

func (s *Identities) CreateIdentity(_ context.Context, id provider.Identity) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.owned(id.DomainID, id.Domain); err != nil {
		return err
	}
	s.calls = append(s.calls, Call{Op: "create", Domain: id.Domain, Selector: id.Selector})
	s.live[id.Domain] = id
	return nil
}

func (s *Identities) SetSigningKey(_ context.Context, domainID, domain, selector string, key *rsa.PrivateKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.owned(domainID, domain); err != nil {
		return err
	}
	s.calls = append(s.calls, Call{Op: "set_signing_key", Domain: domain, Selector: selector})
	id := s.live[domain]
	id.DomainID, id.Domain, id.Selector, id.PrivateKey = domainID, domain, selector, key
	s.live[domain] = id
	return nil
}

func (s *Identities) DeleteIdentity(_ context.Context, domainID, domain string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.owned(domainID, domain); err != nil {
		return err
	}
	s.calls = append(s.calls, Call{Op: "delete", Domain: domain})
	delete(s.live, domain)
	return nil
}

// Calls returns the calls recorded so far.
func (s *Identities) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Identity returns the live identity of domain.
func (s *Identities) Identity(domain string) (provider.Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.live[domain]
	return id, ok
}
