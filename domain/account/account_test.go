package account_test

import (
	"errors"
	"fmt"
	"strings"
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
	if _, err := account.IssueToken(s, "t1", "org:owner", "h", now, time.Time{}); !errors.As(err, &v) {
		t.Fatalf("bad role: %v", err)
	}
	evs, err := account.IssueToken(s, "t1", account.RoleMember, "h", now, time.Time{})
	if err != nil || evs[0].(*account.TokenIssued).Role != account.RoleMember || evs[0].(*account.TokenIssued).ExpiresAt != nil {
		t.Fatalf("issue: %v %v", evs, err)
	}
}

func TestTokenExpiryAndRevocation(t *testing.T) {
	s := replay(&account.Created{AccountID: "a1", Name: "x"})
	var v *domain.ValidationError
	if _, err := account.IssueToken(s, "t1", account.RoleAdmin, "h", now, now); !errors.As(err, &v) || v.Errors[0].Field != "expires_at" {
		t.Fatalf("expiry at issuance: %v", err)
	}
	later := now.Add(time.Hour)
	issued, err := account.IssueToken(s, "t1", account.RoleAdmin, "h", now, later)
	if err != nil || !issued[0].(*account.TokenIssued).ExpiresAt.Equal(later) {
		t.Fatalf("issue expiring: %v %v", issued, err)
	}
	s = replay(append([]domain.Event{&account.Created{AccountID: "a1", Name: "x"}}, issued...)...)

	if _, err := account.RevokeToken(s, "t2", now); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("revoke unknown token: %v", err)
	}
	if _, err := account.RevokeToken(account.State{}, "t1", now); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("revoke on a missing account: %v", err)
	}
	revoked, err := account.RevokeToken(s, "t1", now)
	if err != nil || len(revoked) != 1 || revoked[0].(*account.TokenRevoked).TokenID != "t1" {
		t.Fatalf("revoke: %v %v", revoked, err)
	}
	before := s
	s = account.Evolve(s, revoked[0])
	if revokedAfter, _ := s.Token("t1"); !revokedAfter {
		t.Fatal("the revocation does not show in the new state")
	}
	if revokedBefore, _ := before.Token("t1"); revokedBefore {
		t.Fatal("the revocation shows in the state before it")
	}
	if again, err := account.RevokeToken(s, "t1", now); err != nil || len(again) != 0 {
		t.Fatalf("revoking twice: %v %v", again, err)
	}
}

func TestRetention(t *testing.T) {
	if _, err := account.SetRetention(account.State{}, days(30), now); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("retention of no account: %v", err)
	}
	s := replay(&account.Created{AccountID: "a1", Name: "Acme"})
	for _, d := range []int{0, 366, -1} {
		if _, err := account.SetRetention(s, days(d), now); err == nil {
			t.Errorf("retention of %d days accepted", d)
		}
	}
	if evs, err := account.SetRetention(s, nil, now); err != nil || len(evs) != 0 {
		t.Fatalf("the default while on the default: %v %v", evs, err)
	}
	evs, err := account.SetRetention(s, days(30), now)
	if err != nil || len(evs) != 1 || evs[0].(*account.RetentionSet).Days != 30 {
		t.Fatalf("set 30 days: %v %v", evs, err)
	}
	s = account.Evolve(s, evs[0])
	if s.RetentionDays != 30 {
		t.Fatalf("state after RetentionSet: %+v", s)
	}
	if again, err := account.SetRetention(s, days(30), now); err != nil || len(again) != 0 {
		t.Fatalf("setting the same retention again: %v %v", again, err)
	}
	// Back to the server's default.
	evs, err = account.SetRetention(s, nil, now)
	if err != nil || len(evs) != 1 || evs[0].(*account.RetentionSet).Days != 0 {
		t.Fatalf("back to the default: %v %v", evs, err)
	}
	if s = account.Evolve(s, evs[0]); s.RetentionDays != 0 {
		t.Fatalf("state after going back to the default: %+v", s)
	}
}

func days(n int) *int { return &n }

// Issuing a token keeps the ones issued before: the first of two can
// still be revoked.
func TestRevokingOneTokenKeepsTheOthers(t *testing.T) {
	c, _ := account.Create(account.State{}, "a1", "Acme", now)
	s := replay(c...)
	i1, _ := account.IssueToken(s, "t1", account.RoleAdmin, "h1", now, now.AddDate(0, 0, 1))
	s = replay(append(c, i1...)...)
	i2, _ := account.IssueToken(s, "t2", account.RoleAdmin, "h2", now, now.AddDate(0, 0, 1))
	s = replay(append(append(c, i1...), i2...)...)
	evs, err := account.RevokeToken(s, "t1", now)
	if err != nil || len(evs) != 1 {
		t.Fatalf("revoke the first of two tokens: %v %v", evs, err)
	}
}

// Names are counted in characters, not bytes.
func TestAccountNameIsAtMost200Characters(t *testing.T) {
	if _, err := account.Create(account.State{}, "a1", strings.Repeat("é", 200), now); err != nil {
		t.Fatalf("200 characters refused: %v", err)
	}
	_, err := account.Create(account.State{}, "a1", strings.Repeat("é", 201), now)
	var v *domain.ValidationError
	if !errors.As(err, &v) || v.Errors[0].Message != "must be at most 200 characters; got 201" {
		t.Fatalf("201 characters: %v", err)
	}
}

func TestRetentionIsBetween1And365Days(t *testing.T) {
	c, _ := account.Create(account.State{}, "a1", "Acme", now)
	s := replay(c...)
	for _, d := range []int{1, 365} {
		if evs, err := account.SetRetention(s, days(d), now); err != nil || len(evs) != 1 {
			t.Errorf("%d days: %v %v", d, evs, err)
		}
	}
	for _, d := range []int{0, 366} {
		_, err := account.SetRetention(s, days(d), now)
		var v *domain.ValidationError
		if !errors.As(err, &v) || len(v.Errors) != 1 || v.Errors[0].Field != "retention_days" || v.Errors[0].Message != "must be between 1 and 365, or null for the server's default" {
			t.Errorf("%d days: %v", d, err)
		}
	}
}

// Reinstating an active account records nothing; a missing account can
// be neither reinstated nor given a token.
func TestActiveAndMissingAccounts(t *testing.T) {
	c, _ := account.Create(account.State{}, "a1", "Acme", now)
	if evs, err := account.Reinstate(replay(c...), now); err != nil || len(evs) != 0 {
		t.Errorf("reinstating an active account: %v %v", evs, err)
	}
	if _, err := account.Reinstate(account.State{}, now); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("reinstating a missing account: %v", err)
	}
	if _, err := account.IssueToken(account.State{}, "t1", account.RoleAdmin, "h", now, now.AddDate(0, 0, 1)); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("token for a missing account: %v", err)
	}
}

// BenchmarkLoadingAnAccountWithManyTokens folds the stream of an account
// that issued and revoked thousands of tokens, as every command on the
// account does: each event must cost about the same, not more for each
// one before it.
func BenchmarkLoadingAnAccountWithManyTokens(b *testing.B) {
	evs := []domain.Event{&account.Created{AccountID: "a1", Name: "Acme", CreatedAt: now}}
	for i := range 5000 {
		id := fmt.Sprintf("t%d", i)
		evs = append(evs, &account.TokenIssued{AccountID: "a1", TokenID: id, Role: account.RoleAdmin, IssuedAt: now},
			&account.TokenRevoked{AccountID: "a1", TokenID: id, RevokedAt: now})
	}
	b.ReportAllocs()
	for b.Loop() {
		replay(evs...)
	}
}
