package sendingdomain

import (
	"fmt"
	"slices"
	"time"

	"github.com/mailroom/mailroom/domain"
)

// Add decides adding a BYODKIM domain (key given) or importing a legacy one
// (tokens given). name must already be normalised (NormalizeName).
func Add(s State, id, accountID, name, region string, key *Key, legacyTokens []string, now time.Time) ([]domain.Event, error) {
	if s.ID != "" {
		return nil, &domain.ConflictError{Code: "domain_exists", Detail: "domain already exists"}
	}
	mode := BYODKIM
	if key == nil {
		mode = Legacy
	}
	return []domain.Event{&Added{
		DomainID: id, AccountID: accountID, Name: name, Region: region, MailFromDomain: MailFromHost(name),
		DkimMode: mode, Key: key, LegacyTokens: legacyTokens, AddedAt: now, Deadline: now.Add(VerificationWindow),
	}}, nil
}

// owned returns ErrNotFound unless the domain exists and belongs to
// accountID ("" skips the ownership check, for background work).
func owned(s State, accountID string) error {
	if !s.Exists() || (accountID != "" && s.AccountID != accountID) {
		return domain.ErrNotFound
	}
	return nil
}

// Outcome is what a DNS check found, seen by every resolver.
type Outcome struct {
	DkimOK     bool // records of the key in use
	MailFromOK bool
	DmarcOK    bool
	NewKeyOK   bool // the record of a key awaiting DNS
	Servers    []ServerCheck
}

// RecordCheck decides what a DNS check means. asked is true when the
// account asked for it (verify), which also restarts a window that is over
// (WindowOver) and is recorded unless it found what the check recorded
// within RepeatedCheckQuiet found; a background check is recorded only
// when it changes something.
func RecordCheck(s State, accountID string, o Outcome, asked bool, now time.Time) ([]domain.Event, error) {
	if err := owned(s, accountID); err != nil {
		return nil, err
	}
	if !asked && s.Status == StatusVerified && s.Transition == nil {
		return nil, nil // nothing left for a background check to decide
	}
	var evs []domain.Event
	restart := asked && s.WindowOver(now)
	if restart {
		evs = append(evs, &VerificationRestarted{DomainID: s.ID, RestartedAt: now, Deadline: now.Add(VerificationWindow)})
	}
	if asked && !restart && s.repeats(o, now) {
		asked = false // nothing new to say: recorded only if it changes something, as a background check
	}
	if asked || o.DkimOK != s.DkimOK || o.MailFromOK != s.MailFromOK {
		evs = append(evs, &Checked{DomainID: s.ID, DkimOK: o.DkimOK, MailFromOK: o.MailFromOK, DmarcOK: o.DmarcOK, Servers: o.Servers, CheckedAt: now})
	}
	pending := s.Status == StatusPending || restart
	if pending && o.DkimOK && o.MailFromOK {
		evs = append(evs, &Verified{DomainID: s.ID, Method: "dns", VerifiedAt: now})
	}
	if t := s.Transition; t != nil && t.State == AwaitingDNS && o.NewKeyOK {
		old := ""
		if s.Active != nil {
			old = s.Active.Selector
		}
		evs = append(evs, &KeyCutOver{DomainID: s.ID, Kind: t.Kind, Selector: t.Key.Selector, OldSelector: old,
			CutOverAt: now, OldKeyRetiresAt: now.Add(OldKeyOverlap)})
	}
	return evs, nil
}

// WindowOver reports whether the domain's verification window has ended:
// it expired, or its deadline has passed and the poller has not marked it
// failed yet. A verify then restarts it.
func (s State) WindowOver(now time.Time) bool {
	return s.Status == StatusFailed || (s.Status == StatusPending && !now.Before(s.Deadline))
}

// VerifyBySandbox decides an operator's verification of a pending domain
// without DNS, allowed only with the sandbox provider.
func VerifyBySandbox(s State, now time.Time) ([]domain.Event, error) {
	if err := owned(s, ""); err != nil {
		return nil, err
	}
	switch s.Status {
	case StatusVerified:
		return nil, nil
	case StatusPending:
		return []domain.Event{&Verified{DomainID: s.ID, Method: "sandbox", VerifiedAt: now}}, nil
	default:
		// Its name was given up; a verify claims it again first.
		return nil, &domain.ConflictError{Code: "domain_not_pending", Detail: "only a pending domain can be verified without DNS"}
	}
}

// Expire decides the end of the verification window.
func Expire(s State, now time.Time) ([]domain.Event, error) {
	if !s.Exists() || s.Status != StatusPending || now.Before(s.Deadline) {
		return nil, nil
	}
	return []domain.Event{&VerificationExpired{DomainID: s.ID, ExpiredAt: now}}, nil
}

// CanRotate reports why a rotation may not start. It is asked before a key
// is made, so that refused requests cost nothing.
func CanRotate(s State, accountID string) error {
	if err := owned(s, accountID); err != nil {
		return err
	}
	// A change under way comes first: a legacy domain being upgraded is
	// told to wait for its upgrade, not to start one.
	if s.Transition != nil {
		return transitionInProgress(s.Transition)
	}
	if s.Mode != BYODKIM {
		return &domain.ConflictError{Code: "legacy_dkim", Detail: "the domain uses legacy DKIM; upgrade it instead"}
	}
	return nil
}

// transitionInProgress refuses a key change while t is under way, saying
// which change it is and when another may start.
func transitionInProgress(t *Transition) error {
	when := fmt.Sprintf("once its new key is verified and the old one retired, %d days after cutover", int(OldKeyOverlap.Hours()/24))
	if t.State == CutOver {
		when = "once the old key is retired, at " + t.OldKeyRetiresAt.UTC().Format("2006-01-02T15:04:05.000Z") + " (old_key_retires_at)"
	}
	return &domain.ConflictError{Code: "transition_in_progress",
		Detail: fmt.Sprintf("a DKIM key %s is already under way; another can start %s", t.Kind, when)}
}

// StartRotation decides publishing a new key beside the current one. A
// domain not verified yet has signed nothing with its key: the new key
// replaces it at once, and its record is the one to publish.
func StartRotation(s State, accountID string, key Key, now time.Time) ([]domain.Event, error) {
	if err := CanRotate(s, accountID); err != nil {
		return nil, err
	}
	if s.Status != StatusVerified {
		old := ""
		if s.Active != nil {
			old = s.Active.Selector
		}
		return []domain.Event{&KeyReplaced{DomainID: s.ID, Key: key, OldSelector: old, ReplacedAt: now}}, nil
	}
	return []domain.Event{&KeyChangeStarted{DomainID: s.ID, Kind: Rotation, Key: key, StartedAt: now}}, nil
}

// CanUpgrade reports why an upgrade to BYODKIM may not start, before a key
// is made.
func CanUpgrade(s State, accountID string) error {
	if err := owned(s, accountID); err != nil {
		return err
	}
	if s.Mode != Legacy {
		return &domain.ConflictError{Code: "already_byodkim", Detail: "the domain already uses BYODKIM"}
	}
	if s.Transition != nil {
		return transitionInProgress(s.Transition)
	}
	return nil
}

// StartUpgrade decides moving a legacy domain to BYODKIM.
func StartUpgrade(s State, accountID string, key Key, now time.Time) ([]domain.Event, error) {
	if err := CanUpgrade(s, accountID); err != nil {
		return nil, err
	}
	return []domain.Event{&KeyChangeStarted{DomainID: s.ID, Kind: Upgrade, Key: key, StartedAt: now}}, nil
}

// RetireOldKey decides retiring the previous key once its overlap is over.
func RetireOldKey(s State, now time.Time) ([]domain.Event, error) {
	t := s.Transition
	if !s.Exists() || t == nil || t.State != CutOver || now.Before(t.OldKeyRetiresAt) {
		return nil, nil
	}
	sel := ""
	if t.OldKey != nil {
		sel = t.OldKey.Selector
	}
	return []domain.Event{&OldKeyRetired{DomainID: s.ID, Selector: sel, RetiredAt: now}}, nil
}

// Remove decides removing the domain.
func Remove(s State, accountID string, now time.Time) ([]domain.Event, error) {
	if err := owned(s, accountID); err != nil {
		return nil, err
	}
	return []domain.Event{&Removed{DomainID: s.ID, AccountID: s.AccountID, Name: s.Name, RemovedAt: now}}, nil
}

// repeats reports whether o is what the last recorded check found, within
// RepeatedCheckQuiet of it.
func (s State) repeats(o Outcome, now time.Time) bool {
	c := s.LastCheck
	return c != nil && now.Sub(c.CheckedAt) < RepeatedCheckQuiet &&
		c.DkimOK == o.DkimOK && c.MailFromOK == o.MailFromOK && c.DmarcOK == o.DmarcOK &&
		slices.EqualFunc(c.Servers, o.Servers, func(a, b ServerCheck) bool {
			return a.Server == b.Server && a.OK == b.OK && slices.Equal(a.Records, b.Records)
		})
}
