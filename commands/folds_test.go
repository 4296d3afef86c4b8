package commands_test

import (
	"context"
	"testing"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
)

// Two worker processes share an endpoint whose history is long enough for
// each to keep its state between commands. Each must still decide on the
// other's events: the 20th exhausted delivery in a row disables the
// endpoint whichever process records it, and an edit made through one is
// what the other sees and builds on.
func TestTwoProcessesKeepingAnEndpointsStateDecideOnEachOthersEvents(t *testing.T) {
	ctx := context.Background()
	var deps commands.Deps
	h := newHarness(t, func(d *commands.Deps) { deps = *d })
	other := commands.New(deps)
	workers := []*commands.Service{h.svc, other}
	ep := h.endpoint(t, h.newAccount(t))

	// attempt makes a delivery and records its only attempt with code,
	// through worker i%2.
	attempt := func(i, code int) bool {
		t.Helper()
		w := workers[i%2]
		d := newDelivery(ep, false)
		if _, _, err := w.CreateDeliveries(ctx, []commands.NewDelivery{d}, meta); err != nil {
			t.Fatal(err)
		}
		st, expected, err := w.Delivery(ctx, d.DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		got, disabled, err := w.RecordAttempt(ctx, st, expected, delivery.Outcome{ResponseStatus: &code}, nil, 0, false, meta)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]delivery.Status{200: delivery.Delivered, 400: delivery.Failed}[code]; got.Status != want {
			t.Fatalf("attempt %d answered %d: delivery %s, want %s", i, code, got.Status, want)
		}
		return disabled
	}
	// A receiver that refuses every other event: each refusal, and each
	// success after it, is an event on the endpoint's stream.
	for i := range 600 {
		if attempt(i, []int{400, 200}[i%2]) {
			t.Fatalf("attempt %d disabled the endpoint", i)
		}
	}
	if n := len(h.types(t, webhook.Stream(ep.ID))); n < 600 {
		t.Fatalf("the endpoint's stream holds %d events; the test needs a long one", n)
	}

	// Twenty refusals in a row, recorded by both in turn, disable it with
	// the twentieth.
	for i := range webhook.DisableAfterExhausted {
		if disabled := attempt(i+1, 400); disabled != (i == webhook.DisableAfterExhausted-1) {
			t.Fatalf("refusal %d in a row: disabled %v", i+1, disabled)
		}
	}
	for i, w := range workers {
		got, err := w.Webhook(ctx, ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Active || got.DisabledReason != webhook.ReasonFailures || got.ConsecutiveFailures != webhook.DisableAfterExhausted {
			t.Fatalf("process %d sees the endpoint %+v; want disabled after %d failures", i, got, webhook.DisableAfterExhausted)
		}
	}

	// Re-enabled through one process, renamed through the other: each
	// sees both edits.
	if err := other.UpdateWebhook(ctx, ep.AccountID, ep.ID, webhook.Settings{}, ptr(true), meta); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.UpdateWebhook(ctx, ep.AccountID, ep.ID, webhook.Settings{Description: ptr("CRM")}, nil, meta); err != nil {
		t.Fatal(err)
	}
	for i, w := range workers {
		got, err := w.Webhook(ctx, ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Active || got.ConsecutiveFailures != 0 || got.Description != "CRM" {
			t.Fatalf("process %d sees the endpoint %+v; want it active, clean and described", i, got)
		}
	}
}
