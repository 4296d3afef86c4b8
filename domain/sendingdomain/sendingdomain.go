// Package sendingdomain is the aggregate of a domain an account sends from:
// its DKIM keys, MAIL FROM and DMARC records, verification against DNS, key
// rotation, upgrade from legacy Easy DKIM, and removal.
package sendingdomain

import (
	"strings"
	"time"

	"github.com/mailroom/mailroom/domain"
)

// Policy numbers.
const (
	VerificationWindow = 72 * time.Hour
	OldKeyOverlap      = 7 * 24 * time.Hour
	// RepeatedCheckQuiet is how long an asked check that finds what the
	// last recorded check found goes unrecorded: a client polling verify
	// in a loop would otherwise add an event a request to the domain's
	// stream, which every later command on the domain replays.
	RepeatedCheckQuiet = time.Hour
	// MaxDomains is how many domains an account may hold; removed ones do
	// not count, expired ones do until removed.
	MaxDomains = 100
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

const streamPrefix = "domain-"

// Stream is the domain's stream name.
func Stream(id string) string { return streamPrefix + id }

// IDFromStream is the id of the domain whose stream is stream; ok is false
// for a stream of anything else.
func IDFromStream(stream string) (id string, ok bool) { return strings.CutPrefix(stream, streamPrefix) }

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
	// shows, or that was asked for (see RepeatedCheckQuiet).
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
	// KeyReplaced: a domain not verified yet rotated its key. Nothing was
	// signed with the old one, so the new one takes its place at once.
	KeyReplaced struct {
		DomainID    string    `json:"domain_id"`
		Key         Key       `json:"key"`
		OldSelector string    `json:"old_selector"`
		ReplacedAt  time.Time `json:"replaced_at"`
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
	// Records says what the resolver found of each record, and why one did
	// not count: what an owner needs to mend it. (Checks recorded before
	// it existed have none.)
	Records []RecordVerdict `json:"records,omitempty"`
}

// RecordVerdict is one resolver's verdict on one record.
type RecordVerdict struct {
	Type   string `json:"type"`
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"` // why not OK, e.g. "NXDOMAIN", "value differs", "timeout"; or, when OK, where it counts from
}

func (*Added) EventType() string                 { return "DomainAdded" }
func (*Checked) EventType() string               { return "DomainDnsChecked" }
func (*Verified) EventType() string              { return "DomainVerified" }
func (*VerificationExpired) EventType() string   { return "DomainVerificationExpired" }
func (*VerificationRestarted) EventType() string { return "DomainVerificationRestarted" }
func (*KeyChangeStarted) EventType() string      { return "DkimKeyChangeStarted" }
func (*KeyCutOver) EventType() string            { return "DkimKeyCutOver" }
func (*KeyReplaced) EventType() string           { return "DkimKeyReplaced" }
func (*OldKeyRetired) EventType() string         { return "DkimOldKeyRetired" }
func (*Removed) EventType() string               { return "DomainRemoved" }

// Events lists a fresh value of every event type of this aggregate.
func Events() []domain.Event {
	return []domain.Event{&Added{}, &Checked{}, &Verified{}, &VerificationExpired{}, &VerificationRestarted{},
		&KeyChangeStarted{}, &KeyCutOver{}, &KeyReplaced{}, &OldKeyRetired{}, &Removed{}, &NameClaimed{}, &NameReleased{}}
}

// NameStream holds the claim that makes a domain name unique across all
// accounts while its domain is pending or verified.
func NameStream(name string) string { return "domainname-" + name }

// Claim events. Streams written before names were claimed across accounts
// (domainclaim-<account>-<name>) hold the same events.
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

func (*NameClaimed) EventType() string  { return "DomainNameClaimed" }
func (*NameReleased) EventType() string { return "DomainNameReleased" }

// Claim is the state of a name claim: the domain holding it, if any.
type Claim struct {
	DomainID  string
	AccountID string
	ClaimedAt time.Time
}

// EvolveClaim applies a claim event.
func EvolveClaim(c Claim, e domain.Event) Claim {
	switch e := e.(type) {
	case *NameClaimed:
		c = Claim{DomainID: e.DomainID, AccountID: e.AccountID, ClaimedAt: e.ClaimedAt}
	case *NameReleased:
		if c.DomainID == e.DomainID {
			c = Claim{}
		}
	}
	return c
}

// ClaimGrace is how long a fresh claim holds its name whatever its domain
// shows: the domain is appended just after its claim (or, for a verify of an
// expired domain, restarted just after it). A claim whose add crashed frees
// the name after this long.
const ClaimGrace = time.Minute

// ErrUnavailable refuses a name another account holds. It says nothing of
// who holds it.
var ErrUnavailable = &domain.ConflictError{Code: "domain_unavailable", Detail: "this domain is already in use"}

// ClaimName decides claiming name for domainID of accountID. holder is the
// domain the claim names (zero when there is none or it was never added);
// known are the live domains of that name in the read model, in any account,
// which covers domains added before names were claimed across accounts.
//
// A name is taken by a domain of the same account in any status (409
// domain_exists), and by another account's pending or verified domain
// (ErrUnavailable); an expired (failed) domain of another account frees it.
// The decision always records a claim, so two claims of one name meet on the
// claim stream and one of them is decided again.
func ClaimName(c Claim, holder State, known []State, accountID, name, domainID string, now time.Time) ([]domain.Event, error) {
	exists := &domain.ConflictError{Code: "domain_exists", Detail: "the account already has the domain " + name}
	if c.DomainID != "" && c.DomainID != domainID && !holder.Removed && now.Sub(c.ClaimedAt) < ClaimGrace {
		if c.AccountID == accountID {
			return nil, exists
		}
		return nil, ErrUnavailable
	}
	for _, d := range append([]State{holder}, known...) {
		if !d.Exists() || d.ID == domainID {
			continue
		}
		if d.AccountID == accountID {
			return nil, exists
		}
		if d.Status != StatusFailed {
			return nil, ErrUnavailable
		}
	}
	return []domain.Event{&NameClaimed{AccountID: accountID, Name: name, DomainID: domainID, ClaimedAt: now}}, nil
}
