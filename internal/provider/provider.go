// Package provider defines the ports to mail providers (sandbox, SES, SMTP).
package provider

import (
	"context"
	"crypto/rsa"
	"errors"
	"time"
)

// Identity is a sending domain as the provider knows it.
type Identity struct {
	// DomainID is the Mailroom domain that creates, and so owns, the identity.
	DomainID       string
	Domain         string
	MailFromDomain string
	Region         string
	// Selector and PrivateKey are the BYODKIM key; both empty for a legacy
	// domain, whose key the provider manages (Easy DKIM).
	Selector   string
	PrivateKey *rsa.PrivateKey
}

// Identities manages sending identities at the provider. Every call must be
// idempotent: process managers retry after failures and may repeat a call.
//
// An identity belongs to the Mailroom domain id that created it: only that
// domain may change its key or delete it. A call for another domain id
// fails with ErrNotOwner and changes nothing. An identity the provider holds
// without an owner (made before owners were recorded) is taken by the first
// domain of its name that acts on it.
type Identities interface {
	CreateIdentity(ctx context.Context, id Identity) error
	SetSigningKey(ctx context.Context, domainID, domain, selector string, key *rsa.PrivateKey) error
	DeleteIdentity(ctx context.Context, domainID, domain string) error
}

// ErrNotOwner refuses a change to an identity another domain owns. It is
// permanent: repeating the call cannot succeed.
var ErrNotOwner = errors.New("the identity belongs to another domain")

// Outbound is a fully rendered message handed to a provider.
type Outbound struct {
	EmailID    string
	From       string   // envelope sender address
	Recipients []string // to, cc and bcc
	Raw        []byte   // the MIME message (mailmsg.Build)
	Tags       map[string]string
	// DKIM is the sending domain's active key, for providers that sign
	// themselves (SMTP); nil for a legacy domain, whose key the provider holds.
	DKIM *DKIMKey
}

// DKIMKey is a domain's signing key.
type DKIMKey struct {
	Domain     string
	Selector   string
	PrivateKey *rsa.PrivateKey
}

// Sender hands messages to the provider. Send returns the provider's
// message id. A *RejectedError means the provider refused the message for
// good; a *ThrottledError asks to slow down; any other error is transient
// and the send is retried.
type Sender interface {
	Send(ctx context.Context, m Outbound) (string, error)
}

// RejectedError is a permanent refusal by the provider. Reason is the
// provider's whole answer, for operators (it may name relay hosts or
// provider accounts); Code is the part customers may see: an SMTP reply code
// ("550 5.7.1") or the provider's error code ("MessageRejected").
type RejectedError struct{ Reason, Code string }

func (e *RejectedError) Error() string { return "provider rejected the message: " + e.Reason }

// ThrottledError is the provider asking to slow down (SES Throttling or
// TooManyRequests, SMTP 421/451/452): the message was not accepted, but
// nothing is wrong with it or with the provider. The send is retried after
// RetryAfter (zero: the caller's own wait) and never counts as a failure.
type ThrottledError struct {
	Reason     string // the provider's answer, for operators
	RetryAfter time.Duration
	Err        error // the provider's own error, if any
}

func (e *ThrottledError) Error() string { return "provider throttled the message: " + e.Reason }
func (e *ThrottledError) Unwrap() error { return e.Err }

// IsThrottled reports whether err is a *ThrottledError.
func IsThrottled(err error) bool {
	var t *ThrottledError
	return errors.As(err, &t)
}

// NoIdentities is the identity port of providers that keep no sending
// identities (an SMTP relay: Mailroom signs each message itself).
type NoIdentities struct{}

func (NoIdentities) CreateIdentity(context.Context, Identity) error { return nil }
func (NoIdentities) SetSigningKey(context.Context, string, string, string, *rsa.PrivateKey) error {
	return nil
}
func (NoIdentities) DeleteIdentity(context.Context, string, string) error { return nil }
