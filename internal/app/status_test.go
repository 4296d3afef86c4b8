package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/config"
)

// The status and the *_at fields an email shows do not depend on the order
// in which its provider feedback arrives: each case's events are recorded
// in every order, one append each, and read back through the API.
func TestStatusWhateverTheArrivalOrder(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.Roles = []string{"api", "projections"} }) // no pipeline: the test records what it would
	ctx := context.Background()
	meta := commands.Meta{Actor: "operator"}
	base := w.Clock.Now().Add(time.Minute).Truncate(time.Second)
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	type fb struct {
		kind string
		min  int
	}
	event := func(id string, i int, f fb) domain.Event {
		fid := fmt.Sprintf("fb-%d", i)
		switch f.kind {
		case "delivered":
			return &email.Delivered{EmailID: id, FeedbackID: fid, Recipients: []string{"x@example.org"}, OccurredAt: at(f.min)}
		case "opened":
			return &email.Opened{EmailID: id, FeedbackID: fid, OccurredAt: at(f.min)}
		case "clicked":
			return &email.Clicked{EmailID: id, FeedbackID: fid, Link: "https://acme.test/", OccurredAt: at(f.min)}
		case "complained":
			return &email.Complained{EmailID: id, FeedbackID: fid, Recipients: []string{"x@example.org"}, OccurredAt: at(f.min)}
		case "soft-bounce":
			return &email.Bounced{EmailID: id, FeedbackID: fid, BounceType: "Transient", BounceSubtype: "MailboxFull", Recipients: []string{"x@example.org"}, OccurredAt: at(f.min)}
		case "hard-bounce":
			return &email.Bounced{EmailID: id, FeedbackID: fid, BounceType: "Permanent", BounceSubtype: "General", Recipients: []string{"x@example.org"}, OccurredAt: at(f.min)}
		}
		t.Fatalf("unknown feedback %s", f.kind)
		return nil
	}
	const none = -1
	for _, c := range []struct {
		name                                      string
		feedback                                  []fb
		status                                    string
		deliveredAt, openedAt, clickedAt, bounced int // minutes, or none
	}{
		{"transient bounce, then delivered", []fb{{"soft-bounce", 1}, {"delivered", 2}}, "delivered", 2, none, none, 1},
		{"delivered, then a transient bounce", []fb{{"delivered", 1}, {"soft-bounce", 2}}, "bounced", 1, none, none, 2},
		{"transient bounce, then opened", []fb{{"soft-bounce", 1}, {"opened", 2}}, "opened", none, 2, none, 1},
		{"delivered again after a transient bounce", []fb{{"delivered", 1}, {"soft-bounce", 2}, {"delivered", 3}}, "delivered", 1, none, none, 2},
		{"clicked outranks a later open", []fb{{"delivered", 1}, {"clicked", 2}, {"opened", 3}}, "clicked", 1, 3, 2, none},
		{"a permanent bounce ends it", []fb{{"delivered", 1}, {"hard-bounce", 2}, {"opened", 3}}, "bounced", 1, 3, none, 2},
		{"transient bounce, delivered, complained", []fb{{"soft-bounce", 1}, {"delivered", 2}, {"complained", 3}}, "complained", 2, none, none, 1},
		{"complained, then a transient bounce", []fb{{"delivered", 1}, {"complained", 2}, {"soft-bounce", 3}}, "complained", 1, none, none, 3},
	} {
		orders := 0
		permute(len(c.feedback), func(order []int) {
			orders++
			id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": c.name, "text": "t"})["id"].(string)
			if err := w.Commands.RecordEmailSent(ctx, id, commands.Acceptance{MessageID: "pm-" + id, At: time.Now()}, meta); err != nil {
				t.Fatal(err)
			}
			var arrival []string
			for _, i := range order {
				if err := w.Commands.RecordEmailFeedback(ctx, id, []domain.Event{event(id, i, c.feedback[i])}, nil, meta); err != nil {
					t.Fatal(err)
				}
				arrival = append(arrival, fmt.Sprintf("%s@%d", c.feedback[i].kind, c.feedback[i].min))
			}
			e := w.waitFor(t, id, func(e map[string]any) bool { return len(e["events"].([]any)) == 1+len(c.feedback) })
			want := func(min int) any {
				if min == none {
					return nil
				}
				return apitime.Format(at(min))
			}
			got := fmt.Sprint(e["status"], e["delivered_at"], e["opened_at"], e["clicked_at"], e["bounced_at"])
			if exp := fmt.Sprint(c.status, want(c.deliveredAt), want(c.openedAt), want(c.clickedAt), want(c.bounced)); got != exp {
				t.Errorf("%s, arriving %v: status and delivered/opened/clicked/bounced_at %s, want %s", c.name, arrival, got, exp)
			}
			if e["sent_at"] == nil {
				t.Errorf("%s: sent_at is null", c.name)
			}
		})
		if orders < 2 {
			t.Fatalf("%s: %d orders tried", c.name, orders)
		}
	}
}

// permute calls f with every ordering of 0..n-1.
func permute(n int, f func([]int)) {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	var walk func(k int)
	walk = func(k int) {
		if k == n {
			f(append([]int(nil), idx...))
			return
		}
		for i := k; i < n; i++ {
			idx[k], idx[i] = idx[i], idx[k]
			walk(k + 1)
			idx[k], idx[i] = idx[i], idx[k]
		}
	}
	walk(0)
}
