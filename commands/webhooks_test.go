package commands_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/projections"
)

func ptr[T any](v T) *T { return &v }

// hookURL is an endpoint URL the tests' egress policy accepts.
const hookURL = "https://192.0.2.10/hooks/mailroom"

func TestCreateWebhook(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.waitedFor()

	st, secret, err := h.svc.CreateWebhook(ctx, acct, webhook.Settings{URL: ptr(hookURL), Description: ptr("CRM")}, meta)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists() || st.AccountID != acct || st.URL != hookURL || st.Description != "CRM" || !st.Active ||
		!slices.Equal(st.EventTypes, webhook.EventTypes) {
		t.Fatalf("created %+v", st)
	}
	if !strings.HasPrefix(secret, commands.SecretPrefix) {
		t.Fatalf("secret %q", secret)
	}
	c := only[*webhook.Created](t, h, webhook.Stream(st.ID))
	if opened, err := h.box.Open(c.SealedSecret, commands.SecretContext(st.ID)); err != nil || string(opened) != secret {
		t.Fatalf("the sealed secret opens as %q, %v; want the secret handed back", opened, err)
	}
	if got := h.types(t, webhook.SlotsStream(acct)); !slices.Equal(got, []string{"WebhookSlotsSeeded", "WebhookSlotTaken"}) {
		t.Fatalf("slots stream %q", got)
	}
	if w := h.waitedFor(); !slices.Equal(w, []projections.Name{projections.WebhooksName}) {
		t.Errorf("waited for %q, want the webhooks projection", w)
	}

	some, _, err := h.svc.CreateWebhook(ctx, acct, webhook.Settings{URL: ptr(hookURL),
		EventTypes: []string{"email.bounced", "email.sent", "email.bounced"}, TypesGiven: true}, meta)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"email.sent", "email.bounced"}; !slices.Equal(some.EventTypes, want) {
		t.Fatalf("event types %q, want %q", some.EventTypes, want)
	}
}

func TestCreateWebhookRefusesInvalidSettings(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.appended(t)
	for _, c := range []struct {
		name string
		in   webhook.Settings
		want []string
	}{
		{"no url", webhook.Settings{}, []string{"url"}},
		{"plain http", webhook.Settings{URL: ptr("http://192.0.2.10/hooks")}, []string{"url"}},
		{"private address", webhook.Settings{URL: ptr("https://10.0.0.8/hooks")}, []string{"url"}},
		{"loopback", webhook.Settings{URL: ptr("https://127.0.0.1/hooks")}, []string{"url"}},
		{"long description", webhook.Settings{URL: ptr(hookURL), Description: ptr(strings.Repeat("d", webhook.MaxDescription+1))}, []string{"description"}},
		{"no event types", webhook.Settings{URL: ptr(hookURL), EventTypes: []string{}, TypesGiven: true}, []string{"event_types"}},
		{"unknown event type", webhook.Settings{URL: ptr(hookURL), EventTypes: []string{"email.sent", "email.lost"}, TypesGiven: true}, []string{"event_types.1"}},
	} {
		if _, _, err := h.svc.CreateWebhook(ctx, acct, c.in, meta); !slices.Equal(fields(t, err), c.want) {
			t.Errorf("%s: %v, want errors on %q", c.name, err, c.want)
		}
	}
	h.nothingAppended(t, "refused creates")
}

func TestCreateWebhookStopsAtTheEndpointLimit(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	create := func() (webhook.State, error) {
		st, _, err := h.svc.CreateWebhook(ctx, acct, webhook.Settings{URL: ptr(hookURL)}, meta)
		return st, err
	}
	// An endpoint made before slots were recorded counts: the read model
	// seeds the slots.
	old := uuid.NewString()
	h.appendEvent(t, webhook.Stream(old), &webhook.Created{EndpointID: old, AccountID: acct, URL: hookURL,
		EventTypes: webhook.EventTypes, SealedSecret: "sealed", CreatedAt: start})
	var made []webhook.State
	for len(made) < webhook.MaxEndpoints-2 {
		st, err := create()
		if err != nil {
			t.Fatalf("endpoint %d: %v", len(made)+2, err)
		}
		made = append(made, st)
	}
	// A create that took its slot and crashed before its endpoint.
	ghost := uuid.NewString()
	h.appendEvent(t, webhook.SlotsStream(acct), &webhook.SlotTaken{AccountID: acct, EndpointID: ghost, TakenAt: start})
	h.appended(t)

	_, err := create()
	wantLimit(t, err)
	h.nothingAppended(t, "a refused create")
	if err := h.svc.DeleteWebhook(ctx, acct, made[0].ID, meta); err != nil {
		t.Fatal(err)
	}
	if _, err := create(); err != nil {
		t.Fatalf("create after a delete: %v", err)
	}
	_, err = create()
	wantLimit(t, err)
	// The crashed create's slot is free once its grace is over.
	h.clock.Advance(webhook.SlotGrace)
	if _, err := create(); err != nil {
		t.Fatalf("create after the grace: %v", err)
	}
	_, evs := h.stream(t, webhook.SlotsStream(acct))
	freed := 0
	for _, e := range evs {
		if f, ok := e.(*webhook.SlotFreed); ok && f.EndpointID == ghost {
			freed++
		}
	}
	if freed != 1 {
		t.Fatalf("the crashed create's slot was freed %d times, want once", freed)
	}
}

func TestUpdateWebhook(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	st := h.endpoint(t, acct)
	h.appended(t)

	// Another account's endpoint is not found, whatever the request holds.
	for _, id := range []string{st.ID, "not-an-id", uuid.NewString()} {
		if err := h.svc.UpdateWebhook(ctx, other, id, webhook.Settings{URL: ptr("ftp://x")}, nil, meta); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("update %s as another account: %v, want not found", id, err)
		}
	}
	if err := h.svc.UpdateWebhook(ctx, acct, st.ID, webhook.Settings{URL: ptr("https://192.168.1.1/")}, nil, meta); !slices.Equal(fields(t, err), []string{"url"}) {
		t.Errorf("update to a private URL: %v", err)
	}
	h.nothingAppended(t, "refused updates")

	const moved = "https://192.0.2.11/hooks"
	if err := h.svc.UpdateWebhook(ctx, acct, st.ID, webhook.Settings{URL: ptr(moved), EventTypes: []string{"email.failed"}, TypesGiven: true},
		ptr(false), meta); err != nil {
		t.Fatal(err)
	}
	got, err := h.svc.Webhook(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != moved || got.Active || !slices.Equal(got.EventTypes, []string{"email.failed"}) {
		t.Fatalf("after the update %+v", got)
	}
	if err := h.svc.UpdateWebhook(ctx, acct, st.ID, webhook.Settings{}, ptr(true), meta); err != nil {
		t.Fatal(err)
	}
	want := []string{"WebhookEndpointCreated", "WebhookEndpointUpdated", "WebhookEndpointPaused", "WebhookEndpointResumed"}
	if got := h.types(t, webhook.Stream(st.ID)); !slices.Equal(got, want) {
		t.Fatalf("endpoint stream %q, want %q", got, want)
	}
}

func TestDeleteWebhook(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	st := h.endpoint(t, acct)
	if err := h.svc.DeleteWebhook(ctx, other, st.ID, meta); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("delete by another account: %v, want not found", err)
	}
	if err := h.svc.DeleteWebhook(ctx, acct, st.ID, meta); err != nil {
		t.Fatal(err)
	}
	if got := h.types(t, webhook.Stream(st.ID)); !slices.Equal(got, []string{"WebhookEndpointCreated", "WebhookEndpointDeleted"}) {
		t.Fatalf("endpoint stream %q", got)
	}
	if got := h.types(t, webhook.SlotsStream(acct)); got[len(got)-1] != "WebhookSlotFreed" {
		t.Fatalf("slots stream %q: the slot must be freed", got)
	}
	for _, err := range []error{
		h.svc.DeleteWebhook(ctx, acct, st.ID, meta),
		h.svc.OwnWebhook(ctx, acct, st.ID),
		h.svc.UpdateWebhook(ctx, acct, st.ID, webhook.Settings{}, ptr(true), meta),
	} {
		if !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("a deleted endpoint: %v, want not found", err)
		}
	}
}

func TestRotateWebhookSecret(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	st, first, err := h.svc.CreateWebhook(ctx, acct, webhook.Settings{URL: ptr(hookURL)}, meta)
	if err != nil {
		t.Fatal(err)
	}
	second, err := h.svc.RotateWebhookSecret(ctx, acct, st.ID, meta)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.svc.Webhook(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := h.box.Open(got.SealedSecret, commands.SecretContext(st.ID))
	if err != nil || string(opened) != second || second == first {
		t.Fatalf("secret after rotation opens as %q, %v; rotation answered %q, creation %q", opened, err, second, first)
	}
}

// The test route queues one sample delivery for an active endpoint of the
// account; another account's endpoint is not found, and a paused one is
// refused until it is resumed.
func TestTestWebhookQueuesASampleDelivery(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	st := h.endpoint(t, acct)
	h.appended(t)
	h.waitedFor()

	for _, id := range []string{st.ID, "not-an-id", uuid.NewString()} {
		if _, err := h.svc.TestWebhook(ctx, other, id, meta); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("test %s as another account: %v, want not found", id, err)
		}
	}
	h.nothingAppended(t, "tests of endpoints not the account's")

	if err := h.svc.UpdateWebhook(ctx, acct, st.ID, webhook.Settings{}, ptr(false), meta); err != nil {
		t.Fatal(err)
	}
	h.appended(t)
	_, err := h.svc.TestWebhook(ctx, acct, st.ID, meta)
	wantConflict(t, err, "endpoint_inactive")
	h.nothingAppended(t, "a test of a paused endpoint")

	if err := h.svc.UpdateWebhook(ctx, acct, st.ID, webhook.Settings{}, ptr(true), meta); err != nil {
		t.Fatal(err)
	}
	h.appended(t)
	h.waitedFor()
	id, err := h.svc.TestWebhook(ctx, acct, st.ID, meta)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := h.stream(t, delivery.Stream(id))
	c := only[*delivery.Created](t, h, delivery.Stream(id))
	if c.DeliveryID != id || c.EndpointID != st.ID || c.AccountID != acct || c.Type != "email.delivered" || !c.Test ||
		!strings.Contains(c.Payload, c.EmailID) {
		t.Fatalf("the test delivery %+v", c)
	}
	if m := recs[0].Metadata; m.Actor != meta.Actor || m.RequestID != meta.RequestID {
		t.Errorf("the test delivery was recorded by %q on %q, want the caller's request", m.Actor, m.RequestID)
	}
	if n := h.appended(t); n != 1 {
		t.Errorf("a test appended %d events, want 1", n)
	}
	if w := h.waitedFor(); !slices.Equal(w, []projections.Name{projections.WebhooksName}) {
		t.Errorf("waited for %q, want the webhooks projection: the delivery is listed when the test answers", w)
	}
}

// Another account cannot rotate an endpoint's secret, and learns nothing
// of it: the endpoint keeps the secret it had.
func TestRotateWebhookSecretOfAnotherAccountIsNotFound(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	st := h.endpoint(t, acct)
	h.appended(t)
	for _, id := range []string{st.ID, "not-an-id", uuid.NewString()} {
		if secret, err := h.svc.RotateWebhookSecret(ctx, other, id, meta); !errors.Is(err, domain.ErrNotFound) || secret != "" {
			t.Errorf("rotate %s as another account: %q, %v; want not found and no secret", id, secret, err)
		}
	}
	h.nothingAppended(t, "rotations by another account")
}

// A delete the read models do not show in time answers ErrNotVisible, and
// so does its repeat until they show it; then the endpoint is gone. Another
// account's repeat is not found at once: it learns nothing of the endpoint.
func TestDeleteWebhookNotVisibleInTime(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	st := h.endpoint(t, acct)
	h.setVisible(false)
	if err := h.svc.DeleteWebhook(ctx, acct, st.ID, meta); !errors.Is(err, commands.ErrNotVisible) {
		t.Fatalf("a delete the read models do not show: %v, want ErrNotVisible", err)
	}
	if got := h.types(t, webhook.Stream(st.ID)); !slices.Equal(got, []string{"WebhookEndpointCreated", "WebhookEndpointDeleted"}) {
		t.Fatalf("endpoint stream %q: the delete must be recorded", got)
	}
	h.appended(t)
	if err := h.svc.DeleteWebhook(ctx, acct, st.ID, meta); !errors.Is(err, commands.ErrNotVisible) {
		t.Errorf("the retry, still not visible: %v, want ErrNotVisible", err)
	}
	if err := h.svc.DeleteWebhook(ctx, other, st.ID, meta); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another account's delete: %v, want not found", err)
	}
	h.setVisible(true)
	if err := h.svc.DeleteWebhook(ctx, acct, st.ID, meta); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("the retry once visible: %v, want not found", err)
	}
	h.nothingAppended(t, "repeated deletes")
}
