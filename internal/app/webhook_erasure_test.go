package app_test

import (
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// erase destroys the email's data key and, when record is true, records
// the erasure, as retention or an erasure request does.
func (w *hookWorld) erase(t *testing.T, emailID string, record bool) {
	t.Helper()
	if err := w.Keys.Destroy(t.Context(), codec.KeyID(emailID), w.account); err != nil {
		t.Fatal(err)
	}
	if !record {
		return
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

// Deliveries waiting for a paused endpoint when their email's data key is
// destroyed are dropped when the endpoint is resumed: the receiver gets
// nothing, the log shows them failed unattempted, and the endpoint counts
// no failure.
func TestPendingDeliveriesOfAnErasedEmailAreDropped(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	id, _ := w.endpoint(t, map[string]any{"url": rcv.URL})
	w.patch(t, id, map[string]any{"is_active": false})
	emailID := w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "Erase me", "text": "t"})["id"].(string)
	w.waitFor(t, emailID, status("delivered"))
	held := w.waitDeliveries(t, id, 2, unattempted("pending", ""))

	// The key goes first; the read model still lists them pending.
	w.erase(t, emailID, false)
	w.patch(t, id, map[string]any{"is_active": true})
	w.waitDeliveries(t, id, 2, unattempted("failed", delivery.DroppedError))
	for _, d := range held {
		st, _, err := w.Commands.Delivery(t.Context(), d["id"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != delivery.Failed || st.Attempts != 0 || st.Created.Payload != "" {
			t.Fatalf("delivery %s on its stream: %+v", d["id"], st)
		}
	}
	time.Sleep(300 * time.Millisecond) // a stray attempt would have come by now
	if n := len(rcv.requests()); n != 0 {
		t.Fatalf("the receiver got %d requests of an erased email", n)
	}
	if n := w.failures(t, id); n != 0 {
		t.Fatalf("the endpoint counts %v failures", n)
	}

	// Recording the erasure afterwards changes nothing.
	w.erase(t, emailID, true)
	time.Sleep(300 * time.Millisecond)
	w.waitDeliveries(t, id, 2, unattempted("failed", delivery.DroppedError))
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

	w.erase(t, emailID, true)
	w.waitDeliveries(t, id, 2, unattempted("failed", delivery.DroppedError))
	if ds := w.deliveries(t, id, "?status=pending"); len(ds) != 0 {
		t.Fatalf("pending after erasure: %v", ds)
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
