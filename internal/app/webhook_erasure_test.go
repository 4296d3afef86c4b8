package app_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
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
		for deadline := time.Now().Add(60 * time.Second); ; {
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

// A clicked link reaches the receiver, read from the sealed log: no job of
// the queue holds it in the clear.
func TestClickedLinkTravelsOnlySealed(t *testing.T) {
	w := newHookWorld(t)
	rcv := newReceiver(t, always(200))
	w.endpoint(t, map[string]any{"url": rcv.URL, "event_types": []string{"email.clicked"}})
	emailID := w.send(t, map[string]any{"from": "a@acme.test", "to": "ann@example.org", "subject": "Links", "text": "t"})["id"].(string)
	w.waitFor(t, emailID, status("delivered"))
	link := "https://acme.test/track?who=ann-7731"
	click := &email.Clicked{EmailID: emailID, FeedbackID: "click-1", Link: link, OccurredAt: time.Now()}
	if err := w.Commands.RecordEmailFeedback(t.Context(), emailID, []domain.Event{click}, nil, commands.Meta{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	got := rcv.waitFor(t, 1)
	var env struct {
		Type string `json:"type"`
		Data struct {
			Link string `json:"link"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got[0].body, &env); err != nil || env.Type != "email.clicked" || env.Data.Link != link {
		t.Fatalf("click webhook %s (%v)", got[0].body, err)
	}
	var jobs int
	if err := w.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE args::text LIKE '%ann-7731%'`).Scan(&jobs); err != nil || jobs != 0 {
		t.Fatalf("%d jobs hold the link (%v)", jobs, err)
	}
}
