package app_test

import (
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// erase destroys the email's data key and records the erasure, as
// retention or an erasure request does.
func (w *hookWorld) erase(t *testing.T, emailID string) {
	t.Helper()
	if err := w.Keys.Destroy(t.Context(), codec.KeyID(emailID), w.account); err != nil {
		t.Fatal(err)
	}
	data, err := codec.Encode(&email.Erased{EmailID: emailID, AccountID: w.account, Reason: email.ErasedOnRequest, ErasedAt: time.Now()},
		eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Store.Append(t.Context(), email.Stream(emailID), eventstore.Any, data); err != nil {
		t.Fatal(err)
	}
}

// failures is the endpoint's consecutive failure count.
func (w *hookWorld) failures(t *testing.T, endpoint string) float64 {
	t.Helper()
	r := w.Do("GET", "/v1/webhooks/"+endpoint, w.key, nil)
	if r.Status != 200 {
		t.Fatalf("endpoint: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["consecutive_failures"].(float64)
}

// Once an email is erased, its deliveries still waiting leave the pending
// set at once, and resuming the endpoint sends none of them.
func TestErasedEmailsHeldDeliveriesAreNeverSent(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	w.patch(t, id, map[string]any{"is_active": false})
	emailID := w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "Erase me", "text": "t"})["id"].(string)
	w.waitFor(t, emailID, status("delivered"))
	w.waitDeliveries(t, id, 2, unattempted("pending", ""))

	w.erase(t, emailID)
	w.waitDeliveries(t, id, 2, unattempted("failed", delivery.DroppedError))
	if ds := w.deliveries(t, id, "?status=pending"); len(ds) != 0 {
		t.Fatalf("pending after erasure: %v", ds)
	}
	// Each delivery's own stream ends too, though no attempt reaches it.
	for _, d := range w.deliveries(t, id, "") {
		did := d["id"].(string)
		for deadline := time.Now().Add(10 * time.Second); ; {
			st, _, err := w.Commands.Delivery(t.Context(), did)
			if err != nil {
				t.Fatal(err)
			}
			if st.Status == delivery.Failed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("delivery %s is still %s on its stream", did, st.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	w.patch(t, id, map[string]any{"is_active": true})
	time.Sleep(300 * time.Millisecond) // a stray attempt would have come by now
	if n := len(rcv.requests()); n != 0 {
		t.Fatalf("the receiver got %d requests of an erased email", n)
	}
	if n := w.failures(t, id); n != 0 {
		t.Fatalf("the endpoint counts %v failures", n)
	}
}
