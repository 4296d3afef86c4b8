package webhook_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/webhook"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func fold(s webhook.State, evs []domain.Event) webhook.State {
	for _, e := range evs {
		s = webhook.Evolve(s, e)
	}
	return s
}

func created(t *testing.T) webhook.State {
	u := "https://hooks.example.com/x"
	evs, err := webhook.Create(webhook.State{}, "w1", "a1", webhook.Settings{URL: &u}, "sealed", t0)
	if err != nil {
		t.Fatal(err)
	}
	return fold(webhook.State{}, evs)
}

func TestCreateDefaultsAndValidation(t *testing.T) {
	s := created(t)
	if len(s.EventTypes) != 7 || !s.Active {
		t.Fatalf("defaults: %+v", s)
	}
	u := "https://x.example"
	long := string(make([]rune, 201))
	var v *domain.ValidationError
	for _, in := range []webhook.Settings{
		{URL: &u, Description: &long},
		{URL: &u, EventTypes: []string{"email.sent", "email.exploded"}, TypesGiven: true},
		{URL: &u, EventTypes: []string{}, TypesGiven: true},
	} {
		if _, err := webhook.Create(webhook.State{}, "w2", "a1", in, "s", t0); !errors.As(err, &v) {
			t.Errorf("%+v accepted", in)
		}
	}
}

func TestDisableAndResume(t *testing.T) {
	s := created(t)
	for i := 1; i < webhook.DisableAfterExhausted; i++ {
		s = fold(s, webhook.RecordOutcome(s, fmt.Sprint("d", i), false, t0))
		if !s.Active {
			t.Fatalf("disabled after %d", i)
		}
	}
	// The same delivery counts once.
	if evs := webhook.RecordOutcome(s, "d1", false, t0); len(evs) != 0 {
		t.Fatal("a delivery counted twice")
	}
	// A success in between resets the count.
	s = fold(s, webhook.RecordOutcome(s, "d", true, t0))
	if s.ConsecutiveFailures != 0 {
		t.Fatal("success did not reset the count")
	}
	for i := range webhook.DisableAfterExhausted {
		s = fold(s, webhook.RecordOutcome(s, fmt.Sprint("e", i), false, t0))
	}
	if s.Active || s.DisabledReason != webhook.ReasonFailures {
		t.Fatalf("after 20: %+v", s)
	}
	yes := true
	evs, err := webhook.Update(s, "a1", webhook.Settings{}, &yes, t0)
	if err != nil {
		t.Fatal(err)
	}
	s = fold(s, evs)
	if !s.Active || s.DisabledReason != "" || s.ConsecutiveFailures != 0 {
		t.Fatalf("after resume: %+v", s)
	}
	if _, err := webhook.Update(s, "other", webhook.Settings{}, &yes, t0); !errors.Is(err, domain.ErrNotFound) {
		t.Fatal("another account updated the endpoint")
	}
}

// What a create or an update sets is what the endpoint then has: event
// types deduplicated in their canonical order, an update without is_active
// leaves it active.
func TestCreateAndUpdateKeepTheirSettings(t *testing.T) {
	u, d := "https://hooks.example.com/x", "billing"
	evs, err := webhook.Create(webhook.State{}, "w1", "a1", webhook.Settings{URL: &u, Description: &d,
		EventTypes: []string{"email.delivered", "email.sent", "email.sent"}, TypesGiven: true}, "s", t0)
	if err != nil {
		t.Fatal(err)
	}
	s := fold(webhook.State{}, evs)
	if s.Description != "billing" || !reflect.DeepEqual(s.EventTypes, []string{"email.sent", "email.delivered"}) {
		t.Fatalf("created %+v", s)
	}
	u2, d2 := "https://hooks.example.com/y", "ops"
	evs, err = webhook.Update(s, "a1", webhook.Settings{URL: &u2, Description: &d2, EventTypes: []string{"email.bounced"}, TypesGiven: true}, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	s = fold(s, evs)
	if s.URL != u2 || s.Description != "ops" || !reflect.DeepEqual(s.EventTypes, []string{"email.bounced"}) || !s.Active {
		t.Fatalf("updated %+v", s)
	}
}

// Each bad setting is refused on its own field; unknown event types are
// reported ten at most.
func TestSettingsAreRefusedByField(t *testing.T) {
	u, bad := "https://x.example", "https://x.example/\x00"
	long := "https://x.example/" + strings.Repeat("a", domain.MaxURLBytes)
	d200, d201 := strings.Repeat("d", 200), strings.Repeat("d", 201)
	if err := webhook.ValidateSettings(webhook.Settings{URL: &u, Description: &d200}); err != nil {
		t.Fatalf("200-character description: %v", err)
	}
	many := make([]string, 15)
	for i := range many {
		many[i] = fmt.Sprint("email.x", i)
	}
	for _, c := range []struct {
		in    webhook.Settings
		field string
		n     int
	}{
		{webhook.Settings{URL: &bad}, "url", 1},
		{webhook.Settings{URL: &long}, "url", 1},
		{webhook.Settings{URL: &u, Description: &d201}, "description", 1},
		{webhook.Settings{URL: &u, EventTypes: []string{"email.sent\x1b"}, TypesGiven: true}, "event_types.0", 1},
		{webhook.Settings{URL: &u, EventTypes: many, TypesGiven: true}, "event_types.0", 10},
	} {
		var v *domain.ValidationError
		if err := webhook.ValidateSettings(c.in); !errors.As(err, &v) || v.Errors[0].Field != c.field || len(v.Errors) != c.n {
			t.Errorf("%+v: %v, want %d error(s) on %s", c.in, err, c.n, c.field)
		}
	}
}

// The documented number, written out: 19 exhausted events leave an
// endpoint active, the 20th disables it; a success after none records
// nothing, and a deleted endpoint counts nothing.
func TestTwentyExhaustedEventsDisableAnEndpoint(t *testing.T) {
	s := created(t)
	if evs := webhook.RecordOutcome(s, "d0", true, t0); len(evs) != 0 {
		t.Fatalf("a success with no failures recorded %v", evs)
	}
	for i := 1; i <= 19; i++ {
		s = fold(s, webhook.RecordOutcome(s, fmt.Sprint("d", i), false, t0))
	}
	if !s.Active {
		t.Fatal("disabled after 19")
	}
	s = fold(s, webhook.RecordOutcome(s, "d20", false, t0))
	if s.Active {
		t.Fatal("still active after 20 consecutive exhausted events")
	}
	del, _ := webhook.Delete(s, "a1", t0)
	if evs := webhook.RecordOutcome(fold(s, del), "d21", false, t0); len(evs) != 0 {
		t.Fatalf("a deleted endpoint counted %v", evs)
	}
}
