package account_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/fuzztape"
)

// modelNames are account names with what docs/events.md says is kept of
// them ("" when refused): trimmed, 1 to 200 characters on one line.
var modelNames = []struct{ in, kept string }{
	{"Acme", "Acme"},
	{"  Acme Ltd \t", "Acme Ltd"},
	{"", ""},
	{" \n ", ""},
	{strings.Repeat("é", 200), strings.Repeat("é", 200)},
	{strings.Repeat("é", 201), ""},
	{"Ac\x00me", ""},
	{"Ac\u2028me", ""},
	{"Ac\xffme", ""},
}

var modelRetention = []int{-1, 0, 1, 45, 365, 366}

// FuzzAccountLifecycle runs any sequence of an account's decisions:
// creation under names valid or not, suspensions and reinstatements,
// tokens issued with or without an expiry (past ones included) and
// revoked, unknown tokens revoked, and retention set, cleared or out of
// bounds. After each it checks what docs/events.md ("Account stream") and
// docs/decisions.md ("Credentials", "Personal data") say: decisions on an
// account never created are not found, one that changes nothing records
// nothing, a revoked token stays revoked and the others stay as they
// were, a token expires only in the future, retention is 1 to 365 days or
// the default, and replaying the stream gives every state it went through.
func FuzzAccountLifecycle(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 3, 0, 0, 3, 1, 1, 4, 0, 4, 0, 1, 2, 2, 5, 1, 5, 2, 5, 0})
	f.Add([]byte{0, 5, 0, 2, 3, 1, 2, 3, 0, 1, 4, 1, 4, 9, 5, 5, 6, 0, 4, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		tape := fuzztape.New(data)
		now := now
		var (
			s       account.State
			log     []domain.Event
			history []account.State
			writes  []int
			issued  []string
			revoked = map[string]bool{}
		)
		for step := 1; tape.More() && step < 200; step++ {
			var (
				evs  []domain.Event
				err  error
				want string // the event type expected, "" for none
			)
			before := s
			op := tape.Pick(7)
			switch op {
			case 0:
				name := modelNames[tape.Pick(len(modelNames))]
				evs, err = account.Create(s, "acct", name.in, now)
				switch {
				case s.Exists():
					var c *domain.ConflictError
					if !errors.As(err, &c) {
						t.Fatalf("step %d: created twice: %v", step, err)
					}
				case name.kept == "":
					var v *domain.ValidationError
					if !errors.As(err, &v) {
						t.Fatalf("step %d: name %q accepted: %v", step, name.in, evs)
					}
				default:
					want = "AccountCreated"
					if len(evs) == 1 && evs[0].(*account.Created).Name != name.kept {
						t.Fatalf("step %d: name %q kept as %q", step, name.in, evs[0].(*account.Created).Name)
					}
				}
			case 1:
				evs, err = account.Suspend(s, now)
				if s.Exists() && s.Status == account.StatusActive {
					want = "AccountSuspended"
				}
			case 2:
				evs, err = account.Reinstate(s, now)
				if s.Exists() && s.Status == account.StatusSuspended {
					want = "AccountReinstated"
				}
			case 3:
				id := fmt.Sprintf("tok%d", len(issued))
				role := []account.Role{account.RoleAdmin, account.RoleMember, "org:owner"}[tape.Pick(3)]
				expires := []time.Time{{}, now.Add(time.Hour), now, now.Add(-time.Second)}[tape.Pick(4)]
				evs, err = account.IssueToken(s, id, role, "hash", now, expires)
				valid := role.Valid() && (expires.IsZero() || expires.After(now))
				if s.Exists() && valid {
					want = "ManagementTokenIssued"
					issued = append(issued, id)
				} else if s.Exists() {
					var v *domain.ValidationError
					if !errors.As(err, &v) {
						t.Fatalf("step %d: token with role %q expiring %s: %v", step, role, expires, err)
					}
				}
			case 4:
				id := "never-issued"
				if n := tape.Pick(len(issued) + 1); n < len(issued) {
					id = issued[n]
				}
				evs, err = account.RevokeToken(s, id, now)
				_, known := s.Token(id)
				switch {
				case !s.Exists() || !known:
					if !errors.Is(err, domain.ErrNotFound) {
						t.Fatalf("step %d: revoked %s, never issued: %v", step, id, err)
					}
				case !revoked[id]:
					want = "ManagementTokenRevoked"
					revoked[id] = true
				}
			case 5:
				var days *int
				if n := tape.Pick(len(modelRetention) + 1); n < len(modelRetention) {
					days = &modelRetention[n]
				}
				evs, err = account.SetRetention(s, days, now)
				set := 0
				if days != nil {
					set = *days
				}
				switch {
				case !s.Exists():
				case days != nil && (set < account.MinRetentionDays || set > account.MaxRetentionDays):
					var v *domain.ValidationError
					if !errors.As(err, &v) {
						t.Fatalf("step %d: retention of %d days: %v", step, set, err)
					}
				case set != s.RetentionDays:
					want = "AccountRetentionSet"
				}
			case 6:
				now = now.Add([]time.Duration{time.Second, time.Hour, -time.Hour}[tape.Pick(3)])
				continue
			}
			if op != 0 && !before.Exists() && !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("step %d: a decision on an account never created: %v %v", step, evs, err)
			}
			if err != nil && len(evs) > 0 {
				t.Fatalf("step %d: an error with events: %v %v", step, evs, err)
			}
			if got := modelType(evs); got != want || (want != "" && err != nil) {
				t.Fatalf("step %d: decided %q (%v), want %q, account %+v", step, got, err, want, s)
			}
			if len(evs) == 0 {
				continue
			}
			for _, e := range evs {
				s = account.Evolve(s, e)
				log = append(log, e)
			}
			history, writes = append(history, s), append(writes, len(log))
			for _, id := range issued {
				if r, ok := s.Token(id); !ok || r != revoked[id] {
					t.Fatalf("step %d: token %s issued %v revoked %v, want revoked %v", step, id, ok, r, revoked[id])
				}
			}
			if _, ok := s.Token(fmt.Sprintf("tok%d", len(issued))); ok {
				t.Fatalf("step %d: a token shows issued before it was", step)
			}
			if d := s.RetentionDays; d != 0 && (d < account.MinRetentionDays || d > account.MaxRetentionDays) {
				t.Fatalf("step %d: retention %d days", step, d)
			}
		}
		var replay account.State
		from := 0
		for i, n := range writes {
			for _, e := range log[from:n] {
				replay = account.Evolve(replay, e)
			}
			from = n
			if !reflect.DeepEqual(replay, history[i]) {
				t.Fatalf("write %d: replay %+v, live %+v", i, replay, history[i])
			}
		}
	})
}

func modelType(evs []domain.Event) string {
	switch len(evs) {
	case 0:
		return ""
	case 1:
		return evs[0].EventType()
	}
	return fmt.Sprint(evs)
}
