package commands_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/projections"
)

func TestCreateAPIKeyRecordsOnlyTheSecretsHash(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.waitedFor()

	k, err := h.svc.CreateAPIKey(ctx, acct, " deploy bot ", nil, meta)
	if err != nil {
		t.Fatal(err)
	}
	if !credential.WellFormed(k.Key, credential.APIKeyPrefix) {
		t.Fatalf("key %q is not an API key", k.Key)
	}
	c := only[*apikey.Created](t, h, apikey.Stream(k.Created.KeyID))
	if c.AccountID != acct || c.Name != "deploy bot" || !slices.Equal(c.Permissions, apikey.AllPermissions) ||
		c.KeyHash != credential.Hash(k.Key) || !strings.HasPrefix(k.Key, strings.TrimSuffix(c.KeyPreview, "...")) ||
		!c.CreatedAt.Equal(start) {
		t.Fatalf("created %+v for key %q", c, k.Key)
	}
	recs, _ := h.stream(t, apikey.Stream(c.KeyID))
	if strings.Contains(string(recs[0].Data), k.Key) {
		t.Fatal("the event holds the secret")
	}
	if w := h.waitedFor(); !slices.Equal(w, []projections.Name{projections.APIKeysName}) {
		t.Errorf("waited for %q, want the api_keys projection", w)
	}

	send, err := h.svc.CreateAPIKey(ctx, acct, "sender", []string{"emails:send", "emails:send"}, meta)
	if err != nil {
		t.Fatal(err)
	}
	if got := send.Created.Permissions; !slices.Equal(got, []apikey.Permission{apikey.SendEmails}) {
		t.Fatalf("permissions %q, want emails:send once", got)
	}
}

func TestCreateAPIKeyRefusesInvalidInput(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.appended(t)
	for _, c := range []struct {
		name  string
		perms []string
		want  []string
	}{
		{"", nil, []string{"name"}},
		{strings.Repeat("n", 101), nil, []string{"name"}},
		{"bot", []string{}, []string{"permissions"}},
		{"bot", []string{"emails:delete"}, []string{"permissions.0"}},
	} {
		_, err := h.svc.CreateAPIKey(ctx, acct, c.name, c.perms, meta)
		if got := fields(t, err); !slices.Equal(got, c.want) {
			t.Errorf("create %q %q: fields %q, want %q", c.name, c.perms, got, c.want)
		}
	}
	h.nothingAppended(t, "refused creates")
}

func TestCreateAPIKeyStopsAtTheActiveLimit(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	var first commands.NewAPIKey
	for i := 0; i < apikey.MaxActive; i++ {
		k, err := h.svc.CreateAPIKey(ctx, acct, "bot", nil, meta)
		if err != nil {
			t.Fatalf("key %d: %v", i+1, err)
		}
		if i == 0 {
			first = k
		}
	}
	h.appended(t)
	_, err := h.svc.CreateAPIKey(ctx, acct, "one too many", nil, meta)
	wantLimit(t, err)
	h.nothingAppended(t, "a refused create")
	if _, err := h.svc.CreateAPIKey(ctx, other, "bot", nil, meta); err != nil {
		t.Fatalf("another account's create: %v", err)
	}
	if err := h.svc.RevokeAPIKey(ctx, acct, first.Created.KeyID, meta); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.CreateAPIKey(ctx, acct, "replacement", nil, meta); err != nil {
		t.Fatalf("create after a revoke: %v", err)
	}
}

func TestRevokeAPIKey(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	k, err := h.svc.CreateAPIKey(ctx, acct, "bot", nil, meta)
	if err != nil {
		t.Fatal(err)
	}
	id := k.Created.KeyID
	h.clock.Advance(time.Hour)
	h.waitedFor()

	for _, c := range []struct{ account, id string }{{other, id}, {acct, "k_not-a-uuid"}, {acct, "5f0c7e0e-0d5e-4c55-9a4a-2f7e7e8f1a01"}} {
		if err := h.svc.RevokeAPIKey(ctx, c.account, c.id, meta); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("revoke %s as %s: %v, want not found", c.id, c.account, err)
		}
	}
	if err := h.svc.RevokeAPIKey(ctx, acct, id, meta); err != nil {
		t.Fatal(err)
	}
	_, evs := h.stream(t, apikey.Stream(id))
	r, ok := evs[len(evs)-1].(*apikey.Revoked)
	if len(evs) != 2 || !ok || r.AccountID != acct || !r.RevokedAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("key stream %+v, want created then revoked", evs)
	}
	if w := h.waitedFor(); !slices.Contains(w, projections.APIKeysName) {
		t.Errorf("waited for %q, want the api_keys projection", w)
	}
	// A revoke repeated changes nothing and succeeds.
	if err := h.svc.RevokeAPIKey(ctx, acct, id, meta); err != nil {
		t.Fatal(err)
	}
	if got := h.types(t, apikey.Stream(id)); len(got) != 2 {
		t.Fatalf("a repeated revoke appended: %q", got)
	}
}

func TestRevokeAPIKeyNotVisibleInTime(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	k, err := h.svc.CreateAPIKey(ctx, acct, "bot", nil, meta)
	if err != nil {
		t.Fatal(err)
	}
	id := k.Created.KeyID
	h.setVisible(false)
	if err := h.svc.RevokeAPIKey(ctx, acct, id, meta); !errors.Is(err, commands.ErrNotVisible) {
		t.Fatalf("revoke the read models do not show: %v, want ErrNotVisible", err)
	}
	if got := h.types(t, apikey.Stream(id)); !slices.Equal(got, []string{"ApiKeyCreated", "ApiKeyRevoked"}) {
		t.Fatalf("key stream %q: the revoke must be recorded", got)
	}
	// The retry finds it recorded and answers only once it is visible.
	if err := h.svc.RevokeAPIKey(ctx, acct, id, meta); !errors.Is(err, commands.ErrNotVisible) {
		t.Fatalf("retry still not visible: %v, want ErrNotVisible", err)
	}
	h.setVisible(true)
	if err := h.svc.RevokeAPIKey(ctx, acct, id, meta); err != nil {
		t.Fatalf("retry once visible: %v", err)
	}
	if got := h.types(t, apikey.Stream(id)); len(got) != 2 {
		t.Fatalf("retries appended: %q", got)
	}
}
