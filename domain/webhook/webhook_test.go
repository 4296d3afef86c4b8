package webhook_test

import (
	"errors"
	"fmt"
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
