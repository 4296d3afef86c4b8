package account_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
)

var now = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func replay(evs ...domain.Event) account.State {
	var s account.State
	for _, e := range evs {
		s = account.Evolve(s, e)
	}
	return s
}

func TestLifecycle(t *testing.T) {
	created, err := account.Create(account.State{}, "a1", "  Acme  ", now)
	if err != nil {
		t.Fatal(err)
	}
	s := replay(created...)
	if s.Name != "Acme" || s.Status != account.StatusActive {
		t.Fatalf("after create: %+v", s)
	}
	if _, err := account.Create(s, "a1", "Acme", now); err == nil {
		t.Fatal("creating twice must conflict")
	}

	susp, _ := account.Suspend(s, now)
	s = replay(append(created, susp...)...)
	if s.Status != account.StatusSuspended {
		t.Fatalf("after suspend: %+v", s)
	}
	if again, _ := account.Suspend(s, now); len(again) != 0 {
		t.Fatal("suspending a suspended account must decide nothing")
	}
	rein, _ := account.Reinstate(s, now)
	s = replay(append(append(created, susp...), rein...)...)
	if s.Status != account.StatusActive {
		t.Fatalf("after reinstate: %+v", s)
	}
}

func TestValidationAndMissing(t *testing.T) {
	var v *domain.ValidationError
	if _, err := account.Create(account.State{}, "a1", " ", now); !errors.As(err, &v) {
		t.Fatalf("blank name: %v", err)
	}
	// Names given on the command line may hold anything; the read side
	// cannot store a NUL or bytes that are not UTF-8.
	for _, name := range []string{"Acme\x00", "Acme\xff", "Acme\x1b[2J"} {
		if _, err := account.Create(account.State{}, "a1", name, now); !errors.As(err, &v) || v.Errors[0].Field != "name" {
			t.Fatalf("name %q: %v", name, err)
		}
	}
	if _, err := account.Suspend(account.State{}, now); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("suspend missing: %v", err)
	}
	s := replay(&account.Created{AccountID: "a1", Name: "x"})
	if _, err := account.IssueToken(s, "t1", "org:owner", "h", now); !errors.As(err, &v) {
		t.Fatalf("bad role: %v", err)
	}
	evs, err := account.IssueToken(s, "t1", account.RoleMember, "h", now)
	if err != nil || evs[0].(*account.TokenIssued).Role != account.RoleMember {
		t.Fatalf("issue: %v %v", evs, err)
	}
}
