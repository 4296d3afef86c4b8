package sendingdomain_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	sd "github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/fuzztape"
)

// Commands of the sending domain model: what the API, the poller and the
// operator do to the domains of one name.
const (
	dopAdd = iota
	dopVerify
	dopPoll
	dopExpire
	dopRetire
	dopSandbox
	dopRotate
	dopUpgrade
	dopRemove
	dopClock
	dopOps
)

const modelName = "example.com"

var modelAccounts = []string{"acct-a", "acct-b"}

// modelClockSteps cross the claim's minute, the quiet hour of repeated
// checks, the 72-hour window and the week of a retiring key, and go back.
var modelClockSteps = []time.Duration{-time.Hour, time.Second, 59 * time.Second, time.Minute,
	30 * time.Minute, time.Hour, 24 * time.Hour, sd.VerificationWindow, sd.OldKeyOverlap, -time.Minute}

// modelWorld is one name's claim stream and the domains added under it,
// driven the way commands/domains.go drives them.
type modelWorld struct {
	t      *testing.T
	step   int
	now    time.Time
	claim  sd.Claim
	claims []domain.Event
	ids    []string
	states map[string]sd.State
	logs   map[string][]domain.Event
	writes map[string][]int // each domain's log length after each write
	hist   map[string][]sd.State
	keys   int
}

func (w *modelWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("step %d at %s: "+format, append([]any{w.step, w.now.Format(time.RFC3339)}, args...)...)
}

// live are the domains of the name the read model would list.
func (w *modelWorld) live() []sd.State {
	var out []sd.State
	for _, id := range w.ids {
		if s := w.states[id]; s.Exists() {
			out = append(out, s)
		}
	}
	return out
}

// claimName claims the name for id the way commands.claimName does.
func (w *modelWorld) claimName(account, id string) error {
	var holder sd.State
	if w.claim.DomainID != "" && w.claim.DomainID != id {
		holder = w.states[w.claim.DomainID]
	}
	evs, err := sd.ClaimName(w.claim, holder, w.live(), account, modelName, id, w.now)
	if err != nil && len(evs) > 0 {
		w.fatalf("a refused claim with events %v", evs)
	}
	for _, e := range evs {
		w.claim = sd.EvolveClaim(w.claim, e)
		w.claims = append(w.claims, e)
	}
	return err
}

// claimRefused is whether the documentation says a claim by account for
// id must be refused: a live domain of the same account, another
// account's pending or verified one, or another domain's claim younger
// than a minute whose domain was not removed.
func (w *modelWorld) claimRefused(account, id string) bool {
	for _, d := range w.live() {
		if d.ID == id {
			continue
		}
		if d.AccountID == account || d.Status != sd.StatusFailed {
			return true
		}
	}
	c := w.claim
	return c.DomainID != "" && c.DomainID != id && !w.states[c.DomainID].Removed && w.now.Sub(c.ClaimedAt) < sd.ClaimGrace
}

// record folds a decision about domain id into its state and checks what
// every write must keep.
func (w *modelWorld) record(id string, o *sd.Outcome, asked bool, evs []domain.Event, err error) {
	w.t.Helper()
	if err != nil && len(evs) > 0 {
		w.fatalf("an error with events: %v %v", err, evs)
	}
	if len(evs) == 0 {
		return
	}
	before := w.states[id]
	s := before
	types := map[string]int{}
	for _, e := range evs {
		types[e.EventType()]++
		s = sd.Evolve(s, e)
	}
	if before.Removed {
		w.fatalf("%v recorded for a removed domain", evs)
	}
	if !before.Exists() && types["DomainAdded"] == 0 {
		w.fatalf("%v recorded for a domain never added", evs)
	}
	for _, e := range evs {
		switch e := e.(type) {
		case *sd.Added:
			if !e.Deadline.Equal(e.AddedAt.Add(sd.VerificationWindow)) {
				w.fatalf("deadline %s for a domain added at %s", e.Deadline, e.AddedAt)
			}
		case *sd.Verified:
			if e.Method == "dns" {
				if o == nil || !o.DkimOK || !o.MailFromOK {
					w.fatalf("verified by DNS without DKIM and MAIL FROM seen: %+v", o)
				}
				if types["DomainDnsChecked"] == 0 {
					w.fatalf("verified by DNS without its check recorded: %v", evs)
				}
			}
			if before.Status == sd.StatusVerified {
				w.fatalf("verified twice")
			}
		case *sd.VerificationRestarted:
			if !asked || !before.WindowOver(e.RestartedAt) {
				w.fatalf("window of a %s domain (deadline %s) restarted, asked %v", before.Status, before.Deadline, asked)
			}
			if !e.Deadline.Equal(e.RestartedAt.Add(sd.VerificationWindow)) {
				w.fatalf("restarted at %s until %s", e.RestartedAt, e.Deadline)
			}
		case *sd.VerificationExpired:
			if before.Status != sd.StatusPending || e.ExpiredAt.Before(before.Deadline) {
				w.fatalf("a %s domain expired at %s, deadline %s", before.Status, e.ExpiredAt, before.Deadline)
			}
		case *sd.KeyReplaced:
			if before.Status == sd.StatusVerified {
				w.fatalf("the key of a verified domain replaced without overlap")
			}
		case *sd.KeyChangeStarted:
			if before.Transition != nil {
				w.fatalf("a key change started during another")
			}
			if e.Kind == sd.Rotation && (before.Status != sd.StatusVerified || before.Mode != sd.BYODKIM) {
				w.fatalf("a rotation with overlap of a %s %s domain", before.Status, before.Mode)
			}
			if e.Kind == sd.Upgrade && before.Mode != sd.Legacy {
				w.fatalf("an upgrade of a %s domain", before.Mode)
			}
		case *sd.KeyCutOver:
			if before.Transition == nil || before.Transition.State != sd.AwaitingDNS || o == nil || !o.NewKeyOK {
				w.fatalf("a cut-over without the new key seen: %+v %+v", before.Transition, o)
			}
			if !e.OldKeyRetiresAt.Equal(e.CutOverAt.Add(sd.OldKeyOverlap)) {
				w.fatalf("cut over at %s, old key retires at %s", e.CutOverAt, e.OldKeyRetiresAt)
			}
		case *sd.OldKeyRetired:
			if before.Transition == nil || before.Transition.State != sd.CutOver || e.RetiredAt.Before(before.Transition.OldKeyRetiresAt) {
				w.fatalf("old key retired at %s from %+v", e.RetiredAt, before.Transition)
			}
		case *sd.Checked:
			if !asked && e.DkimOK == before.DkimOK && e.MailFromOK == before.MailFromOK {
				w.fatalf("a background check that changed nothing was recorded")
			}
		}
	}
	// Once verified, a domain stays verified; a failed one becomes
	// pending or verified only when a verify restarts its window.
	switch {
	case before.Status == sd.StatusVerified && s.Status != sd.StatusVerified:
		w.fatalf("a verified domain became %s: %v", s.Status, evs)
	case before.Status == sd.StatusFailed && s.Status != sd.StatusFailed && types["DomainVerificationRestarted"] == 0:
		w.fatalf("a failed domain became %s without a restart: %v", s.Status, evs)
	}
	w.states[id] = s
	w.logs[id] = append(w.logs[id], evs...)
	w.writes[id] = append(w.writes[id], len(w.logs[id]))
	w.hist[id] = append(w.hist[id], s)
}

// check holds after every step, for every domain and the name.
func (w *modelWorld) check() {
	w.t.Helper()
	pendingOrVerified := ""
	accounts := map[string]string{}
	for _, id := range w.ids {
		s := w.states[id]
		if s.ID == "" {
			continue
		}
		// One key signs: a BYODKIM domain's active key, or a legacy
		// domain's CNAMEs.
		switch s.Mode {
		case sd.BYODKIM:
			if s.Active == nil {
				w.fatalf("%s: a BYODKIM domain without a key", id)
			}
		case sd.Legacy:
			if s.Active != nil || len(s.LegacyTokens) == 0 {
				w.fatalf("%s: a legacy domain with key %v and tokens %v", id, s.Active, s.LegacyTokens)
			}
		default:
			w.fatalf("%s: mode %q", id, s.Mode)
		}
		if t := s.Transition; t != nil {
			switch t.State {
			case sd.AwaitingDNS:
				if s.Active != nil && s.Active.Selector == t.Key.Selector {
					w.fatalf("%s: the key awaiting DNS is the active one", id)
				}
			case sd.CutOver:
				if s.Active == nil || s.Active.Selector != t.Key.Selector {
					w.fatalf("%s: cut over to %s, signing with %v", id, t.Key.Selector, s.Active)
				}
			default:
				w.fatalf("%s: transition state %q", id, t.State)
			}
		}
		live := s.KeysLive()
		if len(live) > 2 || (len(live) == 2 && live[0].Selector == live[1].Selector) {
			w.fatalf("%s: live keys %v", id, live)
		}
		if s.CanSend() != (s.Exists() && s.Status == sd.StatusVerified) {
			w.fatalf("%s: %s can send %v", id, s.Status, s.CanSend())
		}
		if !s.Exists() {
			continue
		}
		// One name, one account: no account holds it twice, and the
		// pending and verified domains are one account's.
		if other, ok := accounts[s.AccountID]; ok {
			w.fatalf("account %s holds %s twice: %s and %s", s.AccountID, modelName, other, id)
		}
		accounts[s.AccountID] = id
		if s.Status != sd.StatusFailed {
			if pendingOrVerified != "" && w.states[pendingOrVerified].AccountID != s.AccountID {
				w.fatalf("%s and %s of two accounts both hold %s", pendingOrVerified, id, modelName)
			}
			pendingOrVerified = id
		}
	}
}

// FuzzDomainLifecycle runs any sequence of adds, verifies, background
// checks, expiries, rotations, upgrades, retirements and removals of the
// domains of one name by two accounts, as the API and the poller make
// them, with a clock that crosses the claim's minute, the 72-hour window
// and the key's week of overlap, and sometimes goes back. After each step
// it checks what docs/decisions.md ("Sending domains") and
// docs/events.md ("Sending domain stream", "Domain name stream") say:
// an account holds a name once, only one account's domains hold it while
// pending or verified, a free name can be added and a held one cannot, a
// verified domain stays verified and a failed one stays failed until a
// verify restarts its window, one key signs at a time and the old one
// retires only after its week, and the timers' dates follow the events
// that set them. Replaying each domain's log gives every state it went
// through.
func FuzzDomainLifecycle(f *testing.F) {
	f.Add([]byte{})
	// Each step reads its command, then (once a domain exists) which
	// domain, the account, whether the owner asks, the check's outcome
	// (1 DKIM, 2 MAIL FROM, 4 DMARC, 8 the new key), then its own choices.
	// Verified; rotated; the new key seen; a week later the old one
	// retires and a rotation may start again.
	f.Add([]byte{dopAdd, 0, 0, 0, 0, 0, dopVerify, 0, 0, 0, 3, dopRotate, 0, 0, 0, 0, dopPoll, 0, 0, 0, 11,
		dopClock, 0, 0, 0, 0, 8, dopRetire, 0, 0, 0, 0, dopRotate, 0, 0, 0, 0})
	// Expired; another account takes the name, and the first one's verify
	// is refused until that domain is removed.
	f.Add([]byte{dopAdd, 0, 0, 0, 0, 0, dopClock, 0, 0, 0, 0, 7, dopExpire, 0, 0, 0, 0, dopAdd, 0, 1, 0, 0, 0, 0,
		dopVerify, 0, 0, 1, 3, dopRemove, 1, 1, 0, 0, 1, dopClock, 0, 0, 0, 0, 3, dopVerify, 0, 0, 1, 3})
	// A legacy domain upgraded, cut over, its CNAMEs retired.
	f.Add([]byte{dopAdd, 0, 0, 0, 1, 0, dopSandbox, 0, 0, 0, 0, dopUpgrade, 0, 0, 1, 0, dopVerify, 0, 0, 1, 15,
		dopClock, 0, 0, 0, 0, 8, dopRetire, 0, 0, 0, 0, dopRotate, 0, 0, 1, 0})
	// An add that died after its claim holds the name for a minute.
	f.Add([]byte{dopAdd, 0, 0, 0, 0, 1, dopAdd, 0, 1, 0, 0, 0, 0, dopClock, 0, 0, 0, 0, 3, dopAdd, 0, 1, 0, 0, 0, 0})
	// An expired domain's records appear: it stays failed until a verify.
	f.Add([]byte{dopAdd, 0, 0, 0, 0, 0, dopClock, 0, 0, 0, 0, 7, dopExpire, 0, 0, 0, 0, dopPoll, 0, 0, 0, 3, dopVerify, 0, 0, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		tape := fuzztape.New(data)
		w := &modelWorld{t: t, now: t0, states: map[string]sd.State{}, logs: map[string][]domain.Event{},
			writes: map[string][]int{}, hist: map[string][]sd.State{}}
		for tape.More() && w.step < 150 {
			w.step++
			op := tape.Pick(dopOps)
			// Most commands name a domain added so far and come from its
			// account, some from the other one.
			id := ""
			if len(w.ids) > 0 {
				id = w.ids[tape.Pick(len(w.ids))]
			}
			account := modelAccounts[tape.Pick(len(modelAccounts))]
			owner := w.states[id].AccountID
			if tape.Pick(4) != 0 && owner != "" {
				account = owner
			}
			bits := tape.Pick(64)
			o := &sd.Outcome{DkimOK: bits&1 != 0, MailFromOK: bits&2 != 0, DmarcOK: bits&4 != 0, NewKeyOK: bits&8 != 0}
			switch bits >> 4 {
			case 1:
				o.Servers = []sd.ServerCheck{{Server: "r1", OK: o.DkimOK && o.MailFromOK}}
			case 2:
				o.Servers = []sd.ServerCheck{{Server: "r1", OK: true}, {Server: "r2", Records: []sd.RecordVerdict{{Type: "TXT", Name: "x", Reason: "timeout"}}}}
			}
			switch op {
			case dopAdd:
				if len(w.ids) == 4 {
					continue
				}
				legacy, crash := tape.Pick(2) == 1, tape.Pick(4) == 1
				id := fmt.Sprintf("d%d", len(w.ids))
				refused := w.claimRefused(account, id)
				// As AddDomain: the read model first, then the claim
				// stream, then the domain (unless the add dies between).
				_, err := sd.ClaimName(sd.Claim{}, sd.State{}, w.live(), account, modelName, id, w.now)
				if err == nil {
					err = w.claimName(account, id)
				}
				if (err != nil) != refused {
					w.fatalf("add by %s: %v, the rules say refused %v (claim %+v, live %+v)", account, err, refused, w.claim, w.live())
				}
				if err != nil {
					w.checkRefusal(err, account)
					continue
				}
				w.ids = append(w.ids, id)
				if crash {
					continue
				}
				var key *sd.Key
				var tokens []string
				if legacy {
					tokens = []string{"tok1", "tok2", "tok3"}
				} else {
					k := w.newKey()
					key = &k
				}
				evs, err := sd.Add(w.states[id], id, account, modelName, "eu-west-1", key, tokens, w.now)
				w.record(id, nil, false, evs, err)
				if err != nil {
					w.fatalf("add refused: %v", err)
				}
			case dopVerify:
				if id == "" {
					continue
				}
				st := w.states[id]
				if !st.Exists() || st.AccountID != account {
					evs, err := sd.RecordCheck(st, account, *o, true, w.now)
					if !errors.Is(err, domain.ErrNotFound) {
						w.fatalf("verify of another account's or a missing domain: %v %v", evs, err)
					}
					continue
				}
				if st.Status == sd.StatusFailed {
					// An expired domain gave its name up: it claims it
					// again before its window restarts.
					refused := w.claimRefused(account, id)
					err := w.claimName(account, id)
					if (err != nil) != refused {
						w.fatalf("claim of expired %s by %s: %v, the rules say refused %v", id, account, err, refused)
					}
					if err != nil {
						w.checkRefusal(err, account)
						continue
					}
				}
				w.verify(id, account, *o, true)
			case dopPoll:
				if id == "" || !w.states[id].Exists() {
					continue
				}
				w.verify(id, "", *o, false)
			case dopExpire:
				if id == "" {
					continue
				}
				evs, err := sd.Expire(w.states[id], w.now)
				st := w.states[id]
				if due := st.Exists() && st.Status == sd.StatusPending && !w.now.Before(st.Deadline); due != (len(evs) == 1) {
					w.fatalf("expire of a %s domain, deadline %s: %v", st.Status, st.Deadline, evs)
				}
				w.record(id, nil, false, evs, err)
			case dopRetire:
				if id == "" {
					continue
				}
				evs, err := sd.RetireOldKey(w.states[id], w.now)
				w.record(id, nil, false, evs, err)
			case dopSandbox:
				// Only a development server's first start verifies on the
				// sandbox, a domain it has just added: a failed domain
				// would skip claiming its name again.
				if id == "" || w.states[id].Status != sd.StatusPending {
					continue
				}
				evs, err := sd.VerifyBySandbox(w.states[id], w.now)
				w.record(id, nil, false, evs, err)
			case dopRotate, dopUpgrade:
				if id == "" {
					continue
				}
				st := w.states[id]
				can, start := sd.CanRotate, sd.StartRotation
				if op == dopUpgrade {
					can, start = sd.CanUpgrade, sd.StartUpgrade
				}
				pre := can(st, account)
				evs, err := start(st, account, w.newKey(), w.now)
				if (pre == nil) != (err == nil) {
					w.fatalf("asked before the key: %v; decided: %v", pre, err)
				}
				if err == nil && len(evs) != 1 {
					w.fatalf("a key change decided %v", evs)
				}
				if !st.Exists() || st.AccountID != account {
					if !errors.Is(err, domain.ErrNotFound) {
						w.fatalf("key change of another account's or a missing domain: %v", err)
					}
				}
				w.record(id, nil, false, evs, err)
			case dopRemove:
				if id == "" {
					continue
				}
				st := w.states[id]
				evs, err := sd.Remove(st, account, w.now)
				if (st.Exists() && st.AccountID == account) != (err == nil) {
					w.fatalf("remove of %s (%s, removed %v) by %s: %v", id, st.AccountID, st.Removed, account, err)
				}
				w.record(id, nil, false, evs, err)
				if err == nil && tape.Pick(3) != 0 {
					// Its release follows, unless the removal stopped
					// there (a claim names a removed domain: free).
					rel := &sd.NameReleased{DomainID: id, ReleasedAt: w.now}
					w.claim = sd.EvolveClaim(w.claim, rel)
					w.claims = append(w.claims, rel)
				}
			case dopClock:
				w.now = w.now.Add(modelClockSteps[tape.Pick(len(modelClockSteps))])
				continue
			}
			w.check()
		}
		// Replay: each domain's log and the claim stream folded from
		// nothing pass through every state the live decisions left.
		for _, id := range w.ids {
			var replay sd.State
			from := 0
			for i, n := range w.writes[id] {
				for _, e := range w.logs[id][from:n] {
					replay = sd.Evolve(replay, e)
				}
				from = n
				if !reflect.DeepEqual(replay, w.hist[id][i]) {
					t.Fatalf("%s write %d: replay\n%+v\nlive\n%+v", id, i, replay, w.hist[id][i])
				}
			}
		}
		var claim sd.Claim
		for _, e := range w.claims {
			claim = sd.EvolveClaim(claim, e)
		}
		if claim != w.claim {
			t.Fatalf("claim replayed %+v, live %+v", claim, w.claim)
		}
	})
}

func (w *modelWorld) newKey() sd.Key {
	w.keys++
	sel := fmt.Sprintf("mrkey%03d", w.keys)
	return sd.Key{Selector: sel, PublicKey: "PUB" + sel, SealedKey: "sealed", CreatedAt: w.now}
}

// checkRefusal checks that a refused claim says why without saying who.
func (w *modelWorld) checkRefusal(err error, account string) {
	w.t.Helper()
	var c *domain.ConflictError
	if !errors.As(err, &c) || (c.Code != "domain_exists" && c != sd.ErrUnavailable) {
		w.fatalf("claim refused with %v", err)
	}
	if c.Code == "domain_exists" {
		for _, d := range w.live() {
			if d.AccountID == account {
				return
			}
		}
		if w.claim.AccountID != account {
			w.fatalf("told domain_exists, though %s holds no domain of the name", account)
		}
	}
}

// verify decides a check of id, asked (verify) or not (the poller), and
// checks when it is recorded.
func (w *modelWorld) verify(id, account string, o sd.Outcome, asked bool) {
	w.t.Helper()
	st := w.states[id]
	evs, err := sd.RecordCheck(st, account, o, asked, w.now)
	if err != nil {
		w.fatalf("check refused: %v", err)
	}
	checked := false
	for _, e := range evs {
		if _, ok := e.(*sd.Checked); ok {
			checked = true
		}
	}
	last := st.LastCheck
	repeat := last != nil && w.now.Sub(last.CheckedAt) < sd.RepeatedCheckQuiet && last.DkimOK == o.DkimOK &&
		last.MailFromOK == o.MailFromOK && last.DmarcOK == o.DmarcOK && reflect.DeepEqual(last.Servers, o.Servers)
	changes := o.DkimOK != st.DkimOK || o.MailFromOK != st.MailFromOK
	switch {
	case asked && st.WindowOver(w.now):
		if !checked {
			w.fatalf("a verify that restarts the window not recorded")
		}
	case asked && !repeat:
		if !checked {
			w.fatalf("a verify with something new not recorded: %+v after %+v", o, last)
		}
	case !asked && st.Status == sd.StatusVerified && st.Transition == nil:
		if len(evs) > 0 {
			w.fatalf("a background check of a settled verified domain recorded %v", evs)
		}
	default:
		if checked != changes {
			w.fatalf("a check changing DKIM or MAIL FROM %v recorded %v", changes, checked)
		}
	}
	w.record(id, &o, asked, evs, err)
}
