package commands_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// newDelivery is a delivery of an email event to endpoint.
func newDelivery(endpoint webhook.State, skipped bool) commands.NewDelivery {
	return commands.NewDelivery{Created: delivery.Created{DeliveryID: uuid.NewString(), EndpointID: endpoint.ID,
		AccountID: endpoint.AccountID, EmailID: uuid.NewString(), Type: "email.delivered", Payload: `{"type":"email.delivered"}`,
		CreatedAt: start}, Skipped: skipped}
}

func TestCreateDeliveriesRecordsEachOnce(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	ep := h.endpoint(t, acct)
	ds := []commands.NewDelivery{newDelivery(ep, false), newDelivery(ep, true)}

	fresh, pos, err := h.svc.CreateDeliveries(ctx, ds, meta)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fresh, []bool{true, true}) || pos == eventstore.Start {
		t.Fatalf("fresh %v at %s, want both recorded", fresh, pos)
	}
	if got := h.types(t, delivery.Stream(ds[0].DeliveryID)); !slices.Equal(got, []string{"WebhookDeliveryCreated"}) {
		t.Fatalf("delivery stream %q", got)
	}
	if got := h.types(t, delivery.Stream(ds[1].DeliveryID)); !slices.Equal(got, []string{"WebhookDeliveryCreated", "WebhookDeliverySkipped"}) {
		t.Fatalf("skipped delivery stream %q", got)
	}
	// The first attempt of a fresh delivery need not read it back: Created
	// gives it as recorded.
	st, version := commands.Created(ds[0].Created)
	if got, want, err := h.svc.Delivery(ctx, ds[0].DeliveryID); err != nil || version != want || got.Status != st.Status || got.Created.DeliveryID != st.Created.DeliveryID {
		t.Fatalf("Created gives %+v at %v; the stream holds %+v at %v (%v)", st, version, got, want, err)
	}

	// A redelivered event records only the deliveries it had not.
	ds = append(ds, newDelivery(ep, false))
	h.appended(t)
	fresh, _, err = h.svc.CreateDeliveries(ctx, ds, meta)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fresh, []bool{false, false, true}) {
		t.Fatalf("fresh %v, want only the new delivery", fresh)
	}
	if n := h.appended(t); n != 1 {
		t.Fatalf("the repeat appended %d events, want 1", n)
	}
}

func TestRecordAttemptCountsExhaustedDeliveriesOnTheEndpoint(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	ep := h.endpoint(t, acct)
	schedule := []time.Duration{time.Minute}
	status := func(code int) delivery.Outcome { return delivery.Outcome{ResponseStatus: &code} }
	attempt := func(id string, o delivery.Outcome) delivery.State {
		t.Helper()
		st, expected, err := h.svc.Delivery(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := h.svc.RecordAttempt(ctx, st, expected, o, schedule, 0, false, meta)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ds := []commands.NewDelivery{newDelivery(ep, false), newDelivery(ep, false)}
	if _, _, err := h.svc.CreateDeliveries(ctx, ds, meta); err != nil {
		t.Fatal(err)
	}
	first, second := ds[0].DeliveryID, ds[1].DeliveryID

	if st := attempt(first, status(500)); st.Status != delivery.Pending || !st.NextAt.Equal(start.Add(time.Minute)) {
		t.Fatalf("after a failed first attempt: %+v", st)
	}
	if st := attempt(first, status(500)); st.Status != delivery.Failed {
		t.Fatalf("after the schedule ran out: %+v", st)
	}
	if st := attempt(first, status(200)); st.Status != delivery.Failed {
		t.Fatalf("an attempt after the delivery failed changed it: %+v", st)
	}
	got, err := h.svc.Webhook(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ConsecutiveFailures != 1 {
		t.Fatalf("endpoint counts %d failures, want 1", got.ConsecutiveFailures)
	}
	if st := attempt(second, status(204)); st.Status != delivery.Delivered {
		t.Fatalf("after a success: %+v", st)
	}
	want := []string{"WebhookEndpointCreated", "WebhookEventExhausted", "WebhookFailuresReset"}
	if got := h.types(t, webhook.Stream(ep.ID)); !slices.Equal(got, want) {
		t.Fatalf("endpoint stream %q, want %q", got, want)
	}
	want = []string{"WebhookDeliveryCreated", "WebhookAttemptFailed", "WebhookAttemptFailed"}
	if got := h.types(t, delivery.Stream(first)); !slices.Equal(got, want) {
		t.Fatalf("delivery stream %q, want %q", got, want)
	}
}

func TestRecordAttemptSaysWhichAttemptDisabledTheEndpoint(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	ep := h.endpoint(t, h.newAccount(t))
	var ds []commands.NewDelivery
	for range webhook.DisableAfterExhausted + 1 {
		ds = append(ds, newDelivery(ep, false))
	}
	if _, _, err := h.svc.CreateDeliveries(ctx, ds, meta); err != nil {
		t.Fatal(err)
	}
	code := 500
	for i, d := range ds {
		st, expected, err := h.svc.Delivery(ctx, d.DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		got, disabled, err := h.svc.RecordAttempt(ctx, st, expected, delivery.Outcome{ResponseStatus: &code}, nil, 0, false, meta)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != delivery.Failed {
			t.Fatalf("delivery %d: %s after its only attempt", i, got.Status)
		}
		if want := i == webhook.DisableAfterExhausted-1; disabled != want {
			t.Errorf("failed delivery %d: disabled %v, want %v", i+1, disabled, want)
		}
	}
	if got, err := h.svc.Webhook(ctx, ep.ID); err != nil || got.Active {
		t.Fatalf("endpoint after %d failed deliveries: %+v, %v", len(ds), got, err)
	}
}

// Two workers attempting one delivery (a redelivered job) record one
// attempt: the one holding the delivery as it was before the other's
// attempt records nothing and answers with the delivery as it is.
func TestRecordAttemptAfterAnotherWasRecordedRecordsNothing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	ep := h.endpoint(t, h.newAccount(t))
	d := newDelivery(ep, false)
	if _, _, err := h.svc.CreateDeliveries(ctx, []commands.NewDelivery{d}, meta); err != nil {
		t.Fatal(err)
	}
	st, expected, err := h.svc.Delivery(ctx, d.DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	failed, ok := 500, 204
	schedule := []time.Duration{time.Minute}
	first, _, err := h.svc.RecordAttempt(ctx, st, expected, delivery.Outcome{ResponseStatus: &failed}, schedule, 0, false, meta)
	if err != nil {
		t.Fatal(err)
	}
	h.appended(t)
	late, disabled, err := h.svc.RecordAttempt(ctx, st, expected, delivery.Outcome{ResponseStatus: &ok}, schedule, 0, true, meta)
	if err != nil || disabled {
		t.Fatalf("the late attempt: disabled %v, %v; want nothing done", disabled, err)
	}
	if late.Attempts != 1 || late.Status != delivery.Pending || late.Attempts != first.Attempts {
		t.Fatalf("the late attempt answered %+v, want the delivery after the first attempt %+v", late, first)
	}
	h.nothingAppended(t, "an attempt overtaken by another")
	if got := h.types(t, delivery.Stream(d.DeliveryID)); !slices.Equal(got, []string{"WebhookDeliveryCreated", "WebhookAttemptFailed"}) {
		t.Fatalf("delivery stream %q, want one attempt", got)
	}
}
