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

// A PATCH changes the fields it is given, each on its own, and leaves the
// others as they were.
func TestAnUpdateChangesEachGivenFieldAlone(t *testing.T) {
	u2, d2 := "https://hooks.example.com/y", "ops"
	for name, c := range map[string]struct {
		in   webhook.Settings
		want func(webhook.State) bool
	}{
		"url":         {webhook.Settings{URL: &u2}, func(s webhook.State) bool { return s.URL == u2 && len(s.EventTypes) == 7 }},
		"description": {webhook.Settings{Description: &d2}, func(s webhook.State) bool { return s.Description == "ops" && s.URL == "https://hooks.example.com/x" }},
		"event_types": {webhook.Settings{EventTypes: []string{"email.failed"}, TypesGiven: true}, func(s webhook.State) bool {
			return reflect.DeepEqual(s.EventTypes, []string{"email.failed"}) && s.URL == "https://hooks.example.com/x"
		}},
	} {
		s := created(t)
		evs, err := webhook.Update(s, "a1", c.in, nil, t0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s = fold(s, evs); !c.want(s) {
			t.Errorf("after updating %s alone: %+v", name, s)
		}
	}
}

// is_active: false pauses an active endpoint and true resumes a paused one;
// true sent to an active endpoint resets its failure count, and otherwise
// decides nothing, as does false sent to a paused one.
func TestIsActivePausesAndResumes(t *testing.T) {
	yes, no := true, false
	s := created(t)
	if evs, err := webhook.Update(s, "a1", webhook.Settings{}, &yes, t0); err != nil || len(evs) != 0 {
		t.Fatalf("resuming an active endpoint without failures: %v %v", evs, err)
	}
	evs, err := webhook.Update(s, "a1", webhook.Settings{}, &no, t0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("pause: %v %v", evs, err)
	}
	if _, ok := evs[0].(*webhook.Paused); !ok {
		t.Fatalf("pause recorded %T", evs[0])
	}
	paused := fold(s, evs)
	if paused.Active || paused.DisabledReason != "" {
		t.Fatalf("after pause: %+v", paused)
	}
	if evs, _ := webhook.Update(paused, "a1", webhook.Settings{}, &no, t0); len(evs) != 0 {
		t.Fatalf("pausing a paused endpoint: %v", evs)
	}
	if resumed := fold(paused, mustUpdate(t, paused, &yes)); !resumed.Active {
		t.Fatalf("after resume: %+v", resumed)
	}

	failing := fold(s, webhook.RecordOutcome(s, "d1", false, t0))
	reset := fold(failing, mustUpdate(t, failing, &yes))
	if !reset.Active || reset.ConsecutiveFailures != 0 {
		t.Fatalf("is_active: true on an active endpoint with a failure: %+v", reset)
	}
}

func mustUpdate(t *testing.T, s webhook.State, active *bool) []domain.Event {
	t.Helper()
	evs, err := webhook.Update(s, "a1", webhook.Settings{}, active, t0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("update to active=%v: %v %v", *active, evs, err)
	}
	return evs
}

// A new secret takes effect at once; only the endpoint's account may
// rotate it.
func TestOnlyItsAccountRotatesAnEndpointsSecret(t *testing.T) {
	s := created(t)
	if _, err := webhook.RotateSecret(s, "other", "sealed2", t0); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("another account rotated the secret: %v", err)
	}
	evs, err := webhook.RotateSecret(s, "a1", "sealed2", t0)
	if err != nil {
		t.Fatal(err)
	}
	if s = fold(s, evs); s.SealedSecret != "sealed2" {
		t.Fatalf("secret after rotation: %q", s.SealedSecret)
	}
}

// An unknown event type is named in the error, with the known ones.
func TestUnknownEventTypesAreNamed(t *testing.T) {
	u := "https://x.example"
	err := webhook.ValidateSettings(webhook.Settings{URL: &u, EventTypes: []string{"email.sent", "email.exploded"}, TypesGiven: true})
	var v *domain.ValidationError
	want := domain.FieldError{Field: "event_types.1", Message: `unknown event type "email.exploded"; known: email.sent, email.delivered, email.opened, email.clicked, email.bounced, email.complained, email.failed`}
	if !errors.As(err, &v) || len(v.Errors) != 1 || v.Errors[0] != want {
		t.Fatalf("got %v, want %+v", err, want)
	}
}
