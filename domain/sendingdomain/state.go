package sendingdomain

import (
	"time"

	"github.com/mailroom/mailroom/domain"
)

// Transition is a key change under way.
type Transition struct {
	Kind            TransitionKind
	Key             Key    // the new key
	State           string // "awaiting_dns" or "cut_over"
	StartedAt       time.Time
	CutOverAt       time.Time
	OldKeyRetiresAt time.Time
	OldKey          *Key // kept live until retired
}

// Transition states.
const (
	AwaitingDNS = "awaiting_dns"
	CutOver     = "cut_over"
)

// State is the domain as its events left it.
type State struct {
	ID             string
	AccountID      string
	Name           string
	Region         string
	MailFromDomain string
	Mode           DkimMode
	Status         Status
	DkimOK         bool
	MailFromOK     bool
	Active         *Key
	LegacyTokens   []string
	Transition     *Transition
	LastCheck      *Checked // the last check recorded
	CreatedAt      time.Time
	Deadline       time.Time
	Removed        bool
}

// Exists reports whether the domain was added and not removed.
func (s State) Exists() bool { return s.ID != "" && !s.Removed }

// Evolve applies one event.
func Evolve(s State, e domain.Event) State {
	switch e := e.(type) {
	case *Added:
		s = State{
			ID: e.DomainID, AccountID: e.AccountID, Name: e.Name, Region: e.Region,
			MailFromDomain: e.MailFromDomain, Mode: e.DkimMode, Status: StatusPending,
			Active: e.Key, LegacyTokens: e.LegacyTokens, CreatedAt: e.AddedAt, Deadline: e.Deadline,
		}
	case *Checked:
		s.DkimOK, s.MailFromOK, s.LastCheck = e.DkimOK, e.MailFromOK, e
	case *Verified:
		s.Status = StatusVerified
		if e.Method == "sandbox" {
			s.DkimOK, s.MailFromOK = true, true
		}
	case *VerificationExpired:
		s.Status = StatusFailed
	case *VerificationRestarted:
		s.Status, s.Deadline = StatusPending, e.Deadline
	case *KeyChangeStarted:
		s.Transition = &Transition{Kind: e.Kind, Key: e.Key, State: AwaitingDNS, StartedAt: e.StartedAt}
	case *KeyCutOver:
		if s.Transition != nil {
			t := *s.Transition
			t.State, t.CutOverAt, t.OldKeyRetiresAt, t.OldKey = CutOver, e.CutOverAt, e.OldKeyRetiresAt, s.Active
			key := t.Key
			s.Active, s.Transition, s.Mode = &key, &t, BYODKIM
		}
	case *KeyReplaced:
		key := e.Key
		// The new key's record is yet to be seen.
		s.Active, s.DkimOK = &key, false
	case *OldKeyRetired:
		s.Transition = nil
		s.LegacyTokens = nil
	case *Removed:
		s.Removed = true
	}
	return s
}

// KeyLive reports the DKIM keys whose records must stay published: the
// active key, a key awaiting DNS, and an old key not yet retired.
func (s State) KeysLive() []Key {
	var keys []Key
	if s.Active != nil {
		keys = append(keys, *s.Active)
	}
	if t := s.Transition; t != nil {
		switch {
		case t.State == AwaitingDNS:
			keys = append(keys, t.Key)
		case t.OldKey != nil:
			keys = append(keys, *t.OldKey)
		}
	}
	return keys
}

// Selector is the selector of the key in use (the first legacy token for a
// legacy domain).
func (s State) Selector() string {
	if s.Active != nil {
		return s.Active.Selector
	}
	if len(s.LegacyTokens) > 0 {
		return s.LegacyTokens[0]
	}
	return ""
}

// RotationDue reports whether the active key is older than maxAge.
func (s State) RotationDue(now time.Time, maxAge time.Duration) bool {
	return s.Active != nil && s.Transition == nil && now.Sub(s.Active.CreatedAt) > maxAge
}

// CanSend reports whether email may be sent from the domain.
func (s State) CanSend() bool { return s.Exists() && s.Status == StatusVerified }
