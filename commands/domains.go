package commands

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
)

// Domain returns a domain's current state from its stream.
func (s *Service) Domain(ctx context.Context, id string) (sendingdomain.State, error) {
	return s.loadDomain(ctx, id)
}

// loadDomain returns a domain's current state.
func (s *Service) loadDomain(ctx context.Context, id string) (sendingdomain.State, error) {
	if _, err := uuid.Parse(id); err != nil {
		return sendingdomain.State{}, domain.ErrNotFound
	}
	st, _, err := load(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve)
	return st, err
}

// AddDomain adds a sending domain with a new BYODKIM key.
func (s *Service) AddDomain(ctx context.Context, accountID, rawName string, meta Meta) (sendingdomain.State, error) {
	return s.addDomain(ctx, accountID, rawName, false, meta)
}

// ImportLegacyDomain adds a domain on provider-managed Easy DKIM (three
// CNAME records), as domains created before BYODKIM were. The account's
// first event tells it exists; its tokens after it are not read.
func (s *Service) ImportLegacyDomain(ctx context.Context, accountID, rawName string, meta Meta) (sendingdomain.State, error) {
	if err := s.accountExists(ctx, accountID); err != nil {
		return sendingdomain.State{}, err
	}
	return s.addDomain(ctx, accountID, rawName, true, meta)
}

func (s *Service) addDomain(ctx context.Context, accountID, rawName string, legacy bool, meta Meta) (sendingdomain.State, error) {
	name, problem := sendingdomain.NormalizeName(rawName)
	if problem == "" {
		problem = sendingdomain.CheckRegistrable(name)
	}
	if problem == "" {
		problem = sendingdomain.CheckOwnable(name)
	}
	if problem == "" && legacy && len(name) > sendingdomain.MaxLegacyNameLength {
		problem = fmt.Sprintf("must be at most %d characters for legacy DKIM, so that its CNAME records' names (token._domainkey.<domain>) fit in DNS's 253", sendingdomain.MaxLegacyNameLength)
	}
	if problem != "" {
		return sendingdomain.State{}, &domain.ValidationError{Errors: []domain.FieldError{{Field: "domain", Message: problem}}}
	}
	// Counted on the read model: two adds racing at the cap could both pass.
	n, err := s.domainCount(ctx, accountID)
	if err != nil {
		return sendingdomain.State{}, err
	}
	if n >= sendingdomain.MaxDomains {
		return sendingdomain.State{}, &LimitError{Detail: fmt.Sprintf("an account may hold at most %d sending domains; remove one first", sendingdomain.MaxDomains)}
	}
	// A name the read model shows in use is refused before a key is made,
	// so it costs nothing. The key comes before the claim: an add that
	// gives up while it waits for its turn to make one has claimed nothing,
	// and a claim is followed at once by its domain (ClaimGrace). Two adds
	// of one name still cannot both succeed: they meet on the claim.
	id := uuid.NewString()
	now := s.now()
	known, err := s.domainsNamed(ctx, name)
	if err != nil {
		return sendingdomain.State{}, err
	}
	if _, err := sendingdomain.ClaimName(sendingdomain.Claim{}, sendingdomain.State{}, known, accountID, name, id, now); err != nil {
		return sendingdomain.State{}, err
	}
	var key *sendingdomain.Key
	var tokens []string
	if legacy {
		tokens = legacyTokens()
	} else {
		k, err := s.newKey(ctx, accountID, id)
		if err != nil {
			return sendingdomain.State{}, err
		}
		key = &k
	}
	if err := s.claimName(ctx, accountID, name, id, meta); err != nil {
		return sendingdomain.State{}, err
	}
	// Dated when it is recorded, after its claim (making the key took a while).
	evs, err := execute(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve, func(st sendingdomain.State) ([]domain.Event, error) {
		return sendingdomain.Add(st, id, accountID, name, s.region, key, tokens, s.now())
	}, meta, projections.DomainsName)
	if err != nil {
		return sendingdomain.State{}, err
	}
	return fold(sendingdomain.State{}, sendingdomain.Evolve, evs), nil
}

// claimName claims name for domainID on the name's stream, shared by every
// account. Domains the read model shows under that name are asked too: they
// may predate the claim stream.
func (s *Service) claimName(ctx context.Context, accountID, name, domainID string, meta Meta) error {
	known, err := s.domainsNamed(ctx, name)
	if err != nil {
		return err
	}
	_, err = execute(ctx, s, sendingdomain.NameStream(name), sendingdomain.EvolveClaim,
		func(c sendingdomain.Claim) ([]domain.Event, error) {
			var holder sendingdomain.State
			if c.DomainID != "" && c.DomainID != domainID {
				h, err := s.loadDomain(ctx, c.DomainID)
				if err != nil {
					return nil, err
				}
				holder = h
			}
			return sendingdomain.ClaimName(c, holder, known, accountID, name, domainID, s.now())
		}, meta)
	return err
}

// newKey makes a DKIM key for accountID's domainID, in its turn. The key
// is dated when its turn comes, not when it was asked for.
func (s *Service) newKey(ctx context.Context, accountID, domainID string) (sendingdomain.Key, error) {
	release, err := s.keyTurns.Take(ctx, accountID)
	if err != nil {
		return sendingdomain.Key{}, err
	}
	defer release()
	k, err := dkimkey.Generate(s.box, domainID, s.now())
	if err == nil && s.keyGenerated != nil {
		s.keyGenerated()
	}
	return k, err
}

// legacyTokens are the three Easy DKIM tokens of an imported domain.
func legacyTokens() []string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	out := make([]string, 3)
	for i := range out {
		b := make([]byte, 32)
		rand.Read(b)
		for j := range b {
			b[j] = alphabet[int(b[j])%len(alphabet)]
		}
		out[i] = string(b)
	}
	return out
}

// DNSCheck is the verify operation's report: one verdict per resolver.
type DNSCheck struct {
	OK      bool                        `json:"ok"`
	Results []sendingdomain.ServerCheck `json:"results"`
}

// VerifyDomain checks the domain's records on every resolver now and records
// the outcome; an expired verification window starts again.
func (s *Service) VerifyDomain(ctx context.Context, accountID, id string, meta Meta) (sendingdomain.State, DNSCheck, error) {
	st, outcome, err := s.verifyOnce(ctx, accountID, id, meta)
	for try := 2; errors.Is(err, errRecordsChanged) && try <= 3; try++ {
		st, outcome, err = s.verifyOnce(ctx, accountID, id, meta) // judge the records it has now
	}
	if err != nil {
		return st, DNSCheck{}, err
	}
	report := DNSCheck{OK: len(outcome.Servers) > 0, Results: outcome.Servers}
	for _, r := range outcome.Servers {
		report.OK = report.OK && r.OK
	}
	return st, report, nil
}

func (s *Service) verifyOnce(ctx context.Context, accountID, id string, meta Meta) (sendingdomain.State, sendingdomain.Outcome, error) {
	st, err := s.loadDomain(ctx, id)
	if err != nil {
		return st, sendingdomain.Outcome{}, err
	}
	if !st.Exists() || st.AccountID != accountID {
		return st, sendingdomain.Outcome{}, domain.ErrNotFound
	}
	claimed := st.Status == sendingdomain.StatusFailed
	if claimed {
		// An expired domain gave its name up; another account may hold it
		// now. Claiming it again before restarting settles who has it.
		if err := s.claimName(ctx, accountID, st.Name, st.ID, meta); err != nil {
			return st, sendingdomain.Outcome{}, err
		}
	}
	outcome := s.checkDNS(ctx, st)
	checked := checkedRecords(st)
	after, err := s.applyCheck(ctx, id, accountID, checked, outcome, true, claimed, meta)
	if errors.Is(err, errNameGivenUp) {
		// The poller expired the domain while its DNS was looked up: the
		// name is claimed now, just before the window restarts, as above.
		if err := s.claimName(ctx, accountID, st.Name, st.ID, meta); err != nil {
			return st, sendingdomain.Outcome{}, err
		}
		after, err = s.applyCheck(ctx, id, accountID, checked, outcome, true, true, meta)
	}
	return after, outcome, err
}

// errNameGivenUp: a verify would restart the window of a domain that
// expired, giving its name up, after the verify read it, so the verify has
// not claimed the name again. It claims it, then decides again.
var errNameGivenUp = errors.New("the domain gave its name up while it was checked")

// RecheckDomain is the background poll's check: recorded only when it
// changes something, and returned whatever it found. A check overtaken by
// a change of the domain's records records nothing and returns no outcome;
// the next poll judges the new ones.
func (s *Service) RecheckDomain(ctx context.Context, id string, meta Meta) (sendingdomain.State, sendingdomain.Outcome, error) {
	st, err := s.loadDomain(ctx, id)
	if err != nil || !st.Exists() {
		return st, sendingdomain.Outcome{}, err
	}
	o := s.checkDNS(ctx, st)
	after, err := s.applyCheck(ctx, id, "", checkedRecords(st), o, false, false, meta)
	if errors.Is(err, errRecordsChanged) {
		st, err = s.loadDomain(ctx, id)
		return st, sendingdomain.Outcome{}, err
	}
	return after, o, err
}

// errRecordsChanged: the domain's records changed while its DNS was being
// looked up (a key replaced, a rotation begun or cut over), so the check
// judged records the domain no longer has and must not be recorded: it
// would verify the domain with a key whose record nobody looked for.
// Past its retries it is a write contention, answered 503 with Retry-After.
var errRecordsChanged = &eventstore.ConflictError{Stream: "domain records"}

// checkedRecords is what a DNS check of st looks up and how it reads them:
// every record, then which sign and which await DNS.
func checkedRecords(st sendingdomain.State) []sendingdomain.Record {
	out := append(st.Records(), st.SigningRecords()...)
	if r, ok := st.PendingKeyRecord(); ok {
		out = append(out, r)
	}
	return out
}

// applyCheck records a check's outcome on the domain, provided the domain
// still has the records the check looked up (checked). An asked check
// (verify) restarts an expired domain's window only when it has claimed
// the domain's name again (claimed); errNameGivenUp otherwise.
func (s *Service) applyCheck(ctx context.Context, id, accountID string, checked []sendingdomain.Record, o sendingdomain.Outcome, asked, claimed bool, meta Meta) (sendingdomain.State, error) {
	var final sendingdomain.State
	_, err := execute(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve, func(st sendingdomain.State) ([]domain.Event, error) {
		if st.Exists() && !slices.Equal(checked, checkedRecords(st)) {
			return nil, errRecordsChanged
		}
		if asked && !claimed && st.Exists() && st.Status == sendingdomain.StatusFailed {
			return nil, errNameGivenUp
		}
		evs, err := sendingdomain.RecordCheck(st, accountID, o, asked, s.now())
		final = fold(st, sendingdomain.Evolve, evs)
		return evs, err
	}, meta, projections.DomainsName)
	return final, err
}

// checkDNS looks up every record the domain needs and judges them.
func (s *Service) checkDNS(ctx context.Context, st sendingdomain.State) sendingdomain.Outcome {
	records := st.Records()
	lookups := make([]dnscheck.Record, len(records))
	for i, r := range records {
		lookups[i] = dnscheck.Record{Type: r.Type, Name: r.Name, Value: r.Value, Priority: r.Priority, Zone: st.Name}
		if r.Group == sendingdomain.GroupDMARC {
			lookups[i].Inherit = sendingdomain.OrganisationalDMARC(st.Name)
		}
	}
	res := s.dns.Check(ctx, lookups)

	signing := map[string]bool{}
	for _, r := range st.SigningRecords() {
		signing[r.Name] = true
	}
	pending, hasPending := st.PendingKeyRecord()
	isSigning := func(r dnscheck.Record) bool { return signing[r.Name] && (r.Type == "TXT" || r.Type == "CNAME") }
	isMailFrom := func(r dnscheck.Record) bool { return r.Name == st.MailFromDomain }
	isDMARC := func(r dnscheck.Record) bool { return r.Name == "_dmarc."+st.Name }
	isPending := func(r dnscheck.Record) bool { return hasPending && r.Name == pending.Name }
	newKeyOK := hasPending && res.SeenByAll(isPending)
	if newKeyOK {
		// Every resolver sees the key awaiting DNS: this check cuts over
		// to it, so the DKIM it reports is that key's, the one in use
		// from now on, not the one it replaces (which may be gone).
		isSigning = isPending
	}
	// A resolver is ok once it shows every record the domain needs now and
	// for its next step: a key awaiting DNS too, though the domain's own
	// verdict (DkimOK) stays the key in use's, so a verified domain keeps
	// sending while it propagates. A key being retired is not needed.
	required := func(r dnscheck.Record) bool { return isSigning(r) || isPending(r) || isMailFrom(r) }

	o := sendingdomain.Outcome{
		DkimOK:     res.SeenByAll(isSigning),
		MailFromOK: res.SeenByAll(isMailFrom),
		DmarcOK:    res.SeenByAll(isDMARC),
		NewKeyOK:   newKeyOK,
	}
	for _, srv := range res.Servers {
		sc := sendingdomain.ServerCheck{Server: srv.Server, OK: srv.SeenAll(required)}
		for _, r := range srv.Records {
			sc.Records = append(sc.Records, sendingdomain.RecordVerdict{Type: r.Record.Type, Name: r.Record.Name, OK: r.Seen, Reason: r.Reason})
		}
		o.Servers = append(o.Servers, sc)
	}
	if s.identity != nil && (o.DkimOK || o.MailFromOK) {
		// The provider must see it too; if it cannot be asked, nothing is
		// verified this time and the next check tries again.
		dkimOK, mailFromOK, err := s.identity(ctx, st.ID, st.Name)
		o.DkimOK = o.DkimOK && err == nil && dkimOK
		o.MailFromOK = o.MailFromOK && err == nil && mailFromOK
	}
	return o
}

// ExpireDomain ends the verification window of a domain past its deadline.
func (s *Service) ExpireDomain(ctx context.Context, id string, meta Meta) error {
	_, err := execute(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve, func(st sendingdomain.State) ([]domain.Event, error) {
		return sendingdomain.Expire(st, s.now())
	}, meta, projections.DomainsName)
	return err
}

// RetireOldDKIMKey retires the previous key once its overlap is over.
func (s *Service) RetireOldDKIMKey(ctx context.Context, id string, meta Meta) error {
	_, err := execute(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve, func(st sendingdomain.State) ([]domain.Event, error) {
		return sendingdomain.RetireOldKey(st, s.now())
	}, meta, projections.DomainsName)
	return err
}

// VerifyDomainBySandbox marks a domain verified without DNS. Only the
// sandbox provider allows it (for a first local run).
func (s *Service) VerifyDomainBySandbox(ctx context.Context, id string, meta Meta) error {
	_, err := execute(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve, func(st sendingdomain.State) ([]domain.Event, error) {
		return sendingdomain.VerifyBySandbox(st, s.now())
	}, meta, projections.DomainsName)
	return err
}

// RotateDKIM publishes a new key beside the current one.
func (s *Service) RotateDKIM(ctx context.Context, accountID, id string, meta Meta) (sendingdomain.State, error) {
	return s.changeKey(ctx, accountID, id, sendingdomain.CanRotate, sendingdomain.StartRotation, meta)
}

// UpgradeDKIM moves a legacy domain to BYODKIM.
func (s *Service) UpgradeDKIM(ctx context.Context, accountID, id string, meta Meta) (sendingdomain.State, error) {
	return s.changeKey(ctx, accountID, id, sendingdomain.CanUpgrade, sendingdomain.StartUpgrade, meta)
}

type keyDecision func(sendingdomain.State, string, sendingdomain.Key, time.Time) ([]domain.Event, error)

// changeKey makes a key only once the domain is known to be the caller's and
// open to the change: an RSA key costs far more than the lookup.
func (s *Service) changeKey(ctx context.Context, accountID, id string, check func(sendingdomain.State, string) error, decide keyDecision, meta Meta) (sendingdomain.State, error) {
	st, err := s.loadDomain(ctx, id)
	if err != nil {
		return st, err
	}
	if err := check(st, accountID); err != nil {
		return sendingdomain.State{}, err
	}
	key, err := s.newKey(ctx, accountID, id)
	if err != nil {
		return sendingdomain.State{}, err
	}
	var final sendingdomain.State
	// Dated when it is recorded, after its key (making it took a while).
	_, err = execute(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve, func(st sendingdomain.State) ([]domain.Event, error) {
		evs, err := decide(st, accountID, key, s.now())
		final = fold(st, sendingdomain.Evolve, evs)
		return evs, err
	}, meta, projections.DomainsName)
	return final, err
}

// ReleaseDomainName removes every domain that holds name without having
// verified it, whichever account added it, and returns them. It is the
// operator's remedy for a name held from its owner: a pending domain holds
// its name for 72 hours, and its account may restart the window with a
// verify as often as it likes. A verified domain is refused: its account
// showed in DNS that it controls the name.
func (s *Service) ReleaseDomainName(ctx context.Context, rawName string, meta Meta) ([]sendingdomain.State, error) {
	name, problem := sendingdomain.NormalizeName(rawName)
	if problem != "" {
		return nil, &domain.ValidationError{Errors: []domain.FieldError{{Field: "domain", Message: problem}}}
	}
	known, err := s.domainsNamed(ctx, name)
	if err != nil {
		return nil, err
	}
	var holders []sendingdomain.State
	for _, st := range known {
		if !st.Exists() {
			continue
		}
		if st.Status == sendingdomain.StatusVerified {
			return nil, verified(st)
		}
		holders = append(holders, st)
	}
	if len(holders) == 0 {
		return nil, domain.ErrNotFound
	}
	// A domain verified since it was read is refused as one verified before.
	unverified := func(st sendingdomain.State) error {
		if st.Status == sendingdomain.StatusVerified {
			return verified(st)
		}
		return nil
	}
	for _, st := range holders {
		if err := s.removeDomain(ctx, st.AccountID, st.ID, unverified, meta); err != nil {
			return nil, fmt.Errorf("remove domain %s of account %s: %w", st.ID, st.AccountID, err)
		}
	}
	return holders, nil
}

// verified refuses to release the name of a verified domain.
func verified(st sendingdomain.State) error {
	return &domain.ConflictError{Code: "domain_verified",
		Detail: fmt.Sprintf("%s is verified by the account that holds it (%s): it showed in DNS that it controls the name; only that account removes it", st.Name, st.AccountID)}
}

// RemoveDomain removes a domain: sending from it stops at once.
func (s *Service) RemoveDomain(ctx context.Context, accountID, id string, meta Meta) error {
	return s.removeDomain(ctx, accountID, id, nil, meta)
}

// removeDomain is RemoveDomain, refused when guard (if any) refuses the
// domain as it is when the removal is decided.
func (s *Service) removeDomain(ctx context.Context, accountID, id string, guard func(sendingdomain.State) error, meta Meta) error {
	if _, err := uuid.Parse(id); err != nil {
		return domain.ErrNotFound
	}
	var removed *sendingdomain.Removed
	// Confirmed: sends from the domain are refused once the answer says
	// it is gone, on every instance.
	_, err := executeConfirmed(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve, func(st sendingdomain.State) ([]domain.Event, error) {
		if guard != nil && st.Exists() && !st.Removed {
			if err := guard(st); err != nil {
				return nil, err
			}
		}
		evs, err := sendingdomain.Remove(st, accountID, s.now())
		if len(evs) > 0 {
			removed = evs[0].(*sendingdomain.Removed)
		}
		return evs, err
	}, meta, projections.DomainsName)
	if errors.Is(err, domain.ErrNotFound) {
		st, _, _, last, lerr := loadSpan(ctx, s, sendingdomain.Stream(id), sendingdomain.Evolve)
		if lerr == nil && st.Removed && st.AccountID == accountID {
			return s.goneYet(ctx, last, projections.DomainsName)
		}
	}
	if err != nil && !errors.Is(err, ErrNotVisible) {
		return err
	}
	// Free the name. This is best effort: a claim held by a removed domain
	// counts as free anyway, so a failure here loses nothing.
	if data, derr := encodeOne(&sendingdomain.NameReleased{DomainID: id, ReleasedAt: s.now()}, meta); derr == nil && removed != nil {
		s.store.Append(ctx, sendingdomain.NameStream(removed.Name), eventstore.Any, data)
	}
	return err
}
