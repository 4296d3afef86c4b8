package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
)

func TestErasureOfOneRecipientAcrossFiftyEmails(t *testing.T) {
	w := newSendWorld(t)
	ctx := context.Background()
	// The address bounces for good on its first email, so it is
	// suppressed: its later emails fail without reaching the provider.
	const erased = "bounce@simulator.amazonses.com"
	var theirs []string
	for i := range 50 {
		body := map[string]any{"from": "Acme <billing@acme.test>", "subject": "Statement erase-me-4242", "html": "<p>private-body-3131</p>", "to": erased}
		if i%5 == 1 { // some to it in copy, beside someone else
			body["to"], body["cc"] = "someone@example.org", []string{"Bounce Person <" + strings.ToUpper(erased) + ">"}
		}
		theirs = append(theirs, w.send(t, body)["id"].(string))
		if i == 0 {
			w.waitFor(t, theirs[0], status("bounced"))
		}
	}
	var others []string
	for i := range 5 {
		others = append(others, w.sendPersonal(t, personalEmail(i)))
	}
	for _, id := range append(slices.Clone(theirs), others...) {
		w.waitFor(t, id, func(e map[string]any) bool { return e["status"] != "queued" && e["status"] != "sent" })
	}
	digests := contentDigests(t, w.Server, others[0])
	sentDay := w.Clock.Now()
	before := dayCounts(t, w, sentDay)

	member, err := w.Commands.IssueToken(ctx, w.account, account.RoleMember, commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, w.Do("POST", "/api/erasures", member, map[string]any{"email": erased}), http.StatusForbidden, "role_required")
	for body, want := range map[string]string{
		`{"email":"not an address"}`:      "is not a valid email address (it contains a space)",
		`{}`:                              "is required",
		`{"email":"Ann <ann@acme.test>"}`: "must be the address alone, without a display name (ann@acme.test)",
	} {
		r := w.Do("POST", "/api/erasures", w.admin, body)
		wantProblem(t, r, http.StatusUnprocessableEntity, "validation_failed")
		if !strings.Contains(string(r.Body), `{"field":"email","message":"`+want+`"}`) {
			t.Errorf("%s: %s", body, r.Body)
		}
	}

	r := w.Do("POST", "/api/erasures", w.admin, map[string]any{"email": "Bounce@Simulator.AmazonSES.com"})
	if r.Status != http.StatusCreated {
		t.Fatalf("POST /api/erasures: %d %s", r.Status, r.Body)
	}
	got := r.JSON(t)
	var ids []string
	for _, id := range got["email_ids"].([]any) {
		ids = append(ids, id.(string))
	}
	slices.Sort(ids)
	want := slices.Sorted(slices.Values(theirs))
	if got["erased"] != 50.0 || !slices.Equal(ids, want) || got["object"] != "erasure" || got["id"] == "" {
		t.Fatalf("erasure answer: %s", r.Body)
	}
	if strings.Contains(strings.ToLower(string(r.Body)), erased) {
		t.Errorf("the erasure's answer names the address: %s", r.Body)
	}
	// The same request again, as a client retrying after a 503 sends it:
	// the first erasure's answer, and one record of the request.
	if again := w.Do("POST", "/api/erasures", w.admin, map[string]any{"email": erased}); again.Status != http.StatusCreated || string(again.Body) != string(r.Body) {
		t.Fatalf("the request repeated: %d %s, want %s", again.Status, again.Body, r.Body)
	}

	for _, id := range theirs {
		if r := w.Do("GET", "/v1/emails/"+id, w.key, nil); r.Status != http.StatusNotFound {
			t.Errorf("erased email %s: %d", id, r.Status)
		}
	}
	for i, id := range others {
		if e := w.waitFor(t, id, status("delivered")); e["subject"] != personalEmail(i).subject {
			t.Errorf("another recipient's email changed: %v", e)
		}
	}
	for _, d := range digests {
		if blobGone(t, w.Server, d) {
			t.Errorf("another recipient's blob %s was deleted", d)
		}
	}
	log := export(t, w.Server)
	for _, word := range []string{erased, strings.ToUpper(erased), "erase-me-4242", "private-body-3131"} {
		if strings.Contains(log, word) {
			t.Errorf("events export still holds %q", word)
		}
	}
	if n := strings.Count(log, `"type":"AccountErasureCompleted"`); n != 1 {
		t.Errorf("the erasure request is recorded %d times", n)
	}
	verify(t, w.Server)
	if after := dayCounts(t, w, sentDay); after["sent"] != before["sent"] || after["bounced"] != before["bounced"] {
		t.Errorf("daily counts changed by the erasure: %v, was %v", after, before)
	}

	// Still suppressed: a new email to the address fails without leaving.
	again := w.send(t, map[string]any{"from": "billing@acme.test", "to": erased, "subject": "again", "text": "again"})["id"].(string)
	e := w.waitFor(t, again, status("failed"))
	if r := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != "suppressed" {
		t.Errorf("send after erasure failed for %v, want suppressed", r)
	}

	from, to := sentDay.AddDate(0, 0, -1), w.Clock.Now().Add(time.Hour)
	wantAnswers := answers(t, w, from, to)
	rebuildAll(t, w.Server)
	if got := answers(t, w, from, to); got != wantAnswers {
		t.Errorf("answers after rebuild differ:\n got %s\nwant %s", got, wantAnswers)
	}
}

func TestARepeatAfterErasureIsAConflict(t *testing.T) {
	w := newSendWorld(t)
	body := map[string]any{"from": "billing@acme.test", "to": "ann@example.org", "subject": "hi", "text": "hi"}
	h := http.Header{"Idempotency-Key": {"order-1"}}
	first := w.DoHeader("POST", "/v1/emails/send", w.key, h, body)
	if first.Status != http.StatusAccepted {
		t.Fatalf("send: %d %s", first.Status, first.Body)
	}
	w.waitFor(t, first.JSON(t)["id"].(string), status("delivered"))
	if r := w.Do("POST", "/api/erasures", w.admin, map[string]any{"email": "ann@example.org"}); r.Status != http.StatusCreated || r.JSON(t)["erased"] != 1.0 {
		t.Fatalf("erasure: %d %s", r.Status, r.Body)
	}
	wantProblem(t, w.DoHeader("POST", "/v1/emails/send", w.key, h, body), http.StatusConflict, "email_erased")
	if r := w.DoHeader("POST", "/v1/emails/send", w.key, http.Header{"Idempotency-Key": {"order-2"}}, body); r.Status != http.StatusAccepted {
		t.Fatalf("a send with a new key: %d %s", r.Status, r.Body)
	}
}

// An email erased while its suspended account holds it is not held any
// more, and reinstating the account sends nothing of it.
func TestAnEmailErasedWhileHeld(t *testing.T) {
	// No workers yet: the email waits, queued, until the pipeline would
	// hold it for the suspension.
	w := newSendWorld(t, func(c *config.Config) { c.Roles = []string{"api", "projections"} })
	ctx := context.Background()
	meta := commands.Meta{Actor: "operator"}
	id := w.send(t, map[string]any{"from": "billing@acme.test", "to": "ann@example.org", "subject": "held", "text": "held"})["id"].(string)
	if err := w.Commands.SuspendAccount(ctx, w.account, meta); err != nil {
		t.Fatal(err)
	}
	if err := w.Commands.HoldEmail(ctx, id, commands.Meta{Actor: "system:email-pipeline"}); err != nil {
		t.Fatal(err)
	}
	held := func() int {
		var n int
		if err := w.Pool.QueryRow(ctx, `SELECT count(*) FROM held_emails WHERE email_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for deadline := time.Now().Add(60 * time.Second); held() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the email was never held")
		}
	}
	er, err := w.Commands.EraseRecipient(ctx, w.account, "ann@example.org", meta)
	if err != nil || len(er.EmailIDs) != 1 {
		t.Fatalf("erasure: %+v %v", er, err)
	}
	if n := held(); n != 0 {
		t.Fatalf("an erased email is still held (%d)", n)
	}
	if err := w.Commands.ReinstateAccount(ctx, w.account, meta); err != nil {
		t.Fatal(err)
	}
	runWorkers(t, w.Server)
	time.Sleep(time.Second) // a release would have sent it by now
	if _, err := os.Stat(w.outbox(id)); !os.IsNotExist(err) {
		t.Fatalf("an erased email was sent after reinstatement (%v)", err)
	}
	w.waitGone(t, id)
}

// Requests racing to erase one address record one erasure: every one is
// answered with it.
func TestRacingErasuresOfOneAddressRecordOne(t *testing.T) {
	w := newSendWorld(t)
	var sent []string
	for range 5 {
		sent = append(sent, w.send(t, map[string]any{"from": "billing@acme.test", "to": "race@example.org", "subject": "hi", "text": "hi"})["id"].(string))
	}
	for _, id := range sent {
		w.waitFor(t, id, status("delivered"))
	}
	ids := make([]string, 3)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			r := w.Do("POST", "/api/erasures", w.admin, map[string]any{"email": "race@example.org"})
			if r.Status != http.StatusCreated || r.JSON(t)["erased"] != 5.0 {
				t.Errorf("erasure: %d %s", r.Status, r.Body)
				return
			}
			ids[i] = r.JSON(t)["id"].(string)
		})
	}
	wg.Wait()
	if ids[0] == "" || ids[1] != ids[0] || ids[2] != ids[0] {
		t.Fatalf("erasure ids %v, want one", ids)
	}
	var n int
	if err := w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE event_type = 'AccountErasureCompleted'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d erasures recorded, want 1", n)
	}
}

// Erasures are recorded apart from the account's own stream, one stream
// per address: erasing many addresses does not make the account's stream,
// which every command on the account reads, grow. A repeat is recognised
// as such even after another address was erased in between.
func TestErasuresLeaveTheAccountStreamAlone(t *testing.T) {
	w := newSendWorld(t)
	ctx := context.Background()
	accountEvents := func() (n int) {
		if err := w.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE stream_id = $1`, "account-"+w.account).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := accountEvents()
	erase := func(address string) map[string]any {
		r := w.Do("POST", "/api/erasures", w.admin, map[string]any{"email": address})
		if r.Status != http.StatusCreated {
			t.Fatalf("erasure: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)
	}
	w.waitFor(t, w.send(t, map[string]any{"from": "billing@acme.test", "to": "ann@example.org", "subject": "hi", "text": "hi"})["id"].(string), status("delivered"))
	ann := erase("ann@example.org")
	for i := range 5 {
		erase(fmt.Sprintf("p%d@example.org", i))
	}
	if again := erase("ann@example.org"); again["id"] != ann["id"] || again["erased"] != 1.0 {
		t.Fatalf("a repeat after other erasures: %v, want the first %v", again, ann)
	}
	if n := accountEvents(); n != before {
		t.Fatalf("the account's stream went from %d to %d events", before, n)
	}
	var recorded int
	if err := w.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_type = 'AccountErasureCompleted'`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != 6 {
		t.Fatalf("%d erasures recorded, want 6", recorded)
	}
}

// An erasure cut off by the request's deadline goes on to the end: the
// client's repeat is answered with the one erasure, every email in it.
func TestAnErasureOutlivesItsRequest(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) {
		c.HTTPReadTimeout, c.HTTPWriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	})
	var sent []string
	for i := range 300 {
		// A send slower than the short time-outs, on a loaded machine,
		// loses its connection: it is sent again under its key.
		key := http.Header{"Idempotency-Key": {fmt.Sprintf("many-%d", i)}}
		body := map[string]any{"from": "billing@acme.test", "to": "many@example.org", "subject": "hi", "text": "hi"}
		for try := 1; ; try++ {
			r, err := w.Try("POST", "/v1/emails/send", w.key, key, body)
			if err == nil && r.Status == http.StatusAccepted {
				sent = append(sent, r.JSON(t)["id"].(string))
				break
			}
			if err == nil || try == 5 {
				t.Fatalf("send %d: %d %s %v", i, r.Status, r.Body, err)
			}
		}
	}
	for _, id := range sent {
		w.waitFor(t, id, func(e map[string]any) bool { return e["status"] == "delivered" })
	}
	first := w.Do("POST", "/api/erasures", w.admin, map[string]any{"email": "many@example.org"})
	// 300 erasures take longer than the request's 270 ms.
	wantProblem(t, first, http.StatusServiceUnavailable, "not_yet_visible")
	var r apptest.Response
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		if r, err = w.Try("POST", "/api/erasures", w.admin, nil, map[string]any{"email": "many@example.org"}); err == nil && r.Status == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the erasure never completed: %d %s %v", r.Status, r.Body, err)
		}
	}
	if got := r.JSON(t); got["erased"] != 300.0 {
		t.Fatalf("the repeat answered %v erased, want all 300", got["erased"])
	}
	var erasures, ids int
	ctx := context.Background()
	w.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_type = 'AccountErasureCompleted'`).Scan(&erasures)
	w.Pool.QueryRow(ctx, `SELECT count(DISTINCT data->>'erasure_id') FROM events WHERE event_type = 'EmailErased'`).Scan(&ids)
	if erasures != 1 || ids != 1 {
		t.Fatalf("%d erasures recorded, the emails name %d erasure ids; want 1 and 1", erasures, ids)
	}
}
