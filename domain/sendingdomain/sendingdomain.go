// Package sendingdomain is the aggregate of a domain an account sends from:
// its DKIM keys, MAIL FROM and DMARC records, verification against DNS, key
// rotation, upgrade from legacy Easy DKIM, and removal.
package sendingdomain

import (
	"time"

	"github.com/mailroom/mailroom/domain"
)

// Policy numbers of DESIGN §8.
const (
	VerificationWindow = 72 * time.Hour
	OldKeyOverlap      = 7 * 24 * time.Hour
)

// DkimMode says who holds the signing key.
type DkimMode string

const (
	BYODKIM DkimMode = "byodkim" // Mailroom generates the key
	Legacy  DkimMode = "legacy"  // provider-managed Easy DKIM, three CNAMEs
)

// Status of the domain.
type Status string

const (
	StatusPending  Status = "pending"
	StatusVerified Status = "verified"
	StatusFailed   Status = "failed" // not verified within the window
)

// TransitionKind names a key change.
type TransitionKind string

const (
	Rotation TransitionKind = "rotation"
	Upgrade  TransitionKind = "upgrade"
)

// Key is a DKIM key. The private key travels sealed (encrypted with the
// master key); the domain never sees it in the clear.
type Key struct {
	Selector  string    `json:"selector"`
	PublicKey string    `json:"public_key"` // base64 DER, the p= of the record
	SealedKey string    `json:"sealed_private_key"`
	CreatedAt time.Time `json:"created_at"`
}

// Stream is the domain's stream name.
func Stream(id string) string { return "domain-" + id }

// Events.
type (
	Added struct {
		DomainID       string    `json:"domain_id"`
		AccountID      string    `json:"account_id"`
		Name           string    `json:"name"`
		Region         string    `json:"region"`
		MailFromDomain string    `json:"mail_from_domain"`
		DkimMode       DkimMode  `json:"dkim_mode"`
		Key            *Key      `json:"key,omitempty"`           // byodkim
		LegacyTokens   []string  `json:"legacy_tokens,omitempty"` // legacy
		AddedAt        time.Time `json:"added_at"`
		Deadline       time.Time `json:"verification_deadline"`
	}
	// Checked records a DNS check whose outcome changed what the domain
	// shows, or that was asked for.
	Checked struct {
		DomainID   string        `json:"domain_id"`
		DkimOK     bool          `json:"dkim_ok"`
		MailFromOK bool          `json:"mail_from_ok"`
		DmarcOK    bool          `json:"dmarc_ok"`
		Servers    []ServerCheck `json:"servers"`
		CheckedAt  time.Time     `json:"checked_at"`
	}
	Verified struct {
		DomainID   string    `json:"domain_id"`
		Method     string    `json:"method"` // "dns" or "sandbox"
		VerifiedAt time.Time `json:"verified_at"`
	}
	VerificationExpired struct {
		DomainID  string    `json:"domain_id"`
		ExpiredAt time.Time `json:"expired_at"`
	}
	VerificationRestarted struct {
		DomainID    string    `json:"domain_id"`
		RestartedAt time.Time `json:"restarted_at"`
		Deadline    time.Time `json:"verification_deadline"`
	}
	KeyChangeStarted struct {
		DomainID  string         `json:"domain_id"`
		Kind      TransitionKind `json:"kind"`
		Key       Key            `json:"key"`
		StartedAt time.Time      `json:"started_at"`
	}
	KeyCutOver struct {
		DomainID        string         `json:"domain_id"`
		Kind            TransitionKind `json:"kind"`
		Selector        string         `json:"selector"`     // now active
		OldSelector     string         `json:"old_selector"` // "" after an upgrade from legacy
		CutOverAt       time.Time      `json:"cut_over_at"`
		OldKeyRetiresAt time.Time      `json:"old_key_retires_at"`
	}
	OldKeyRetired struct {
		DomainID  string    `json:"domain_id"`
		Selector  string    `json:"selector"` // "" for the legacy CNAMEs
		RetiredAt time.Time `json:"retired_at"`
	}
	Removed struct {
		DomainID  string    `json:"domain_id"`
		AccountID string    `json:"account_id"`
		Name      string    `json:"name"`
		RemovedAt time.Time `json:"removed_at"`
	}
)

// ServerCheck is one resolver's verdict.
type ServerCheck struct {
	Server string `json:"server"`
	OK     bool   `json:"ok"`
}

func (Added) EventType() string                 { return "DomainAdded" }
func (Checked) EventType() string               { return "DomainDnsChecked" }
func (Verified) EventType() string              { return "DomainVerified" }
func (VerificationExpired) EventType() string   { return "DomainVerificationExpired" }
func (VerificationRestarted) EventType() string { return "DomainVerificationRestarted" }
func (KeyChangeStarted) EventType() string      { return "DkimKeyChangeStarted" }
func (KeyCutOver) EventType() string            { return "DkimKeyCutOver" }
func (OldKeyRetired) EventType() string         { return "DkimOldKeyRetired" }
func (Removed) EventType() string               { return "DomainRemoved" }

// Events lists a fresh value of every event type of this aggregate.
func Events() []domain.Event {
	return []domain.Event{&Added{}, &Checked{}, &Verified{}, &VerificationExpired{}, &VerificationRestarted{},
		&KeyChangeStarted{}, &KeyCutOver{}, &OldKeyRetired{}, &Removed{}, &NameClaimed{}, &NameReleased{}}
}

// ClaimStream holds the claim that makes a domain name unique within an
// account. A claim whose domain was removed, or never got added, is free.
func ClaimStream(accountID, name string) string { return "domainclaim-" + accountID + "-" + name }

// Claim events.
type (
	NameClaimed struct {
		AccountID string    `json:"account_id"`
		Name      string    `json:"name"`
		DomainID  string    `json:"domain_id"`
		ClaimedAt time.Time `json:"claimed_at"`
	}
	NameReleased struct {
		DomainID   string    `json:"domain_id"`
		ReleasedAt time.Time `json:"released_at"`
	}
)

func (NameClaimed) EventType() string  { return "DomainNameClaimed" }
func (NameReleased) EventType() string { return "DomainNameReleased" }

// Claim is the state of a name claim: the domain holding it, if any.
type Claim struct{ DomainID string }

// EvolveClaim applies a claim event.
func EvolveClaim(c Claim, e domain.Event) Claim {
	switch e := e.(type) {
	case *NameClaimed:
		c.DomainID = e.DomainID
	case *NameReleased:
		if c.DomainID == e.DomainID {
			c.DomainID = ""
		}
	}
	return c
}

// ClaimName decides claiming a name for domainID. holderAlive says whether
// the domain currently holding the claim exists and is not removed.
func ClaimName(c Claim, holderAlive bool, accountID, name, domainID string, now time.Time) ([]domain.Event, error) {
	if c.DomainID != "" && holderAlive {
		return nil, &domain.ConflictError{Code: "domain_exists", Detail: "the account already has the domain " + name}
	}
	return []domain.Event{&NameClaimed{AccountID: accountID, Name: name, DomainID: domainID, ClaimedAt: now}}, nil
}
