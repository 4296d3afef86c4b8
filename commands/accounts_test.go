package commands_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/projections"
)

func TestCreateAccountIssuesAnAdminToken(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	got, err := h.svc.CreateAccount(ctx, " Acme ", meta)
	if err != nil {
		t.Fatal(err)
	}
	if !credential.WellFormed(got.Token, credential.TokenPrefix) {
		t.Fatalf("token %q is not a management token", got.Token)
	}
	_, evs := h.stream(t, account.Stream(got.AccountID))
	if len(evs) != 2 {
		t.Fatalf("account stream %+v, want created and a token", evs)
	}
	c, ok := evs[0].(*account.Created)
	if !ok || c.AccountID != got.AccountID || c.Name != "Acme" || !c.CreatedAt.Equal(start) {
		t.Fatalf("first event %+v", evs[0])
	}
	tok, ok := evs[1].(*account.TokenIssued)
	if !ok || tok.Role != account.RoleAdmin || tok.TokenHash != credential.Hash(got.Token) || tok.ExpiresAt != nil {
		t.Fatalf("second event %+v", evs[1])
	}

	if _, err := h.svc.CreateAccount(ctx, "  ", meta); !slices.Equal(fields(t, err), []string{"name"}) {
		t.Fatalf("create without a name: %v", err)
	}
}

func TestIssueAndRevokeTokens(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)

	tok, err := h.svc.IssueExpiringToken(ctx, acct, account.RoleMember, 24*time.Hour, meta)
	if err != nil {
		t.Fatal(err)
	}
	if !tok.ExpiresAt.Equal(start.Add(24 * time.Hour)) {
		t.Fatalf("expires at %v", tok.ExpiresAt)
	}
	if _, err := h.svc.IssueToken(ctx, acct, account.Role("org:owner"), meta); !slices.Equal(fields(t, err), []string{"role"}) {
		t.Fatalf("issue with an unknown role: %v", err)
	}
	if _, err := h.svc.IssueToken(ctx, "7d1f0c56-3f4c-4f1e-8d7b-5a0d5c3b9e21", account.RoleAdmin, meta); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("issue for no account: %v, want not found", err)
	}

	if err := h.svc.RevokeToken(ctx, acct, tok.ID, meta); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.RevokeToken(ctx, acct, tok.ID, meta); err != nil {
		t.Fatalf("repeated revoke: %v", err)
	}
	if err := h.svc.RevokeToken(ctx, acct, "no-such-token", meta); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("revoke an unknown token: %v, want not found", err)
	}
	want := []string{"AccountCreated", "ManagementTokenIssued", "ManagementTokenIssued", "ManagementTokenRevoked"}
	if got := h.types(t, account.Stream(acct)); !slices.Equal(got, want) {
		t.Fatalf("account stream %q, want %q", got, want)
	}
}

func TestSuspendAndReinstateAnAccount(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)

	// A suspension is recorded, but the caller hears it is in effect only
	// once the read models show it.
	h.setVisible(false)
	if err := h.svc.SuspendAccount(ctx, acct, meta); !errors.Is(err, commands.ErrNotVisible) {
		t.Fatalf("suspend not yet visible: %v, want ErrNotVisible", err)
	}
	h.setVisible(true)
	h.waitedFor()
	if err := h.svc.SuspendAccount(ctx, acct, meta); err != nil {
		t.Fatalf("suspend retried: %v", err)
	}
	if w := h.waitedFor(); !slices.Equal(w, []projections.Name{projections.AccountsName}) {
		t.Errorf("waited for %q, want the accounts projection", w)
	}
	if err := h.svc.ReinstateAccount(ctx, acct, meta); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.ReinstateAccount(ctx, acct, meta); err != nil {
		t.Fatalf("reinstate an active account: %v", err)
	}
	want := []string{"AccountCreated", "ManagementTokenIssued", "AccountSuspended", "AccountReinstated"}
	if got := h.types(t, account.Stream(acct)); !slices.Equal(got, want) {
		t.Fatalf("account stream %q, want %q", got, want)
	}
	if err := h.svc.SuspendAccount(ctx, "0b7e3c1a-7a43-4b8e-a0a4-0c2f1d5f9e10", meta); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("suspend no account: %v, want not found", err)
	}
}
