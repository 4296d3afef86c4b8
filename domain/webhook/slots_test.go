package webhook_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/webhook"
)

func foldSlots(s webhook.Slots, evs []domain.Event) webhook.Slots {
	for _, e := range evs {
		s = webhook.EvolveSlots(s, e)
	}
	return s
}

func TestSlotsSeededFromExistingEndpoints(t *testing.T) {
	existing := []string{"old1", "old2"}
	evs, err := webhook.TakeSlot(webhook.Slots{}, "a1", "new", existing, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if seed, ok := evs[0].(*webhook.SlotsSeeded); !ok || len(seed.EndpointIDs) != 2 {
		t.Fatalf("first events %+v", evs)
	}
	s := foldSlots(webhook.Slots{}, evs)
	if len(s.Held) != 3 {
		t.Fatalf("held %v", s.Held)
	}
	// Once seeded, the read model is not asked again.
	evs, err = webhook.TakeSlot(s, "a1", "newer", []string{"ignored"}, nil, t0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("second take %+v %v", evs, err)
	}
	// An account with no endpoints seeds an empty list.
	evs, _ = webhook.TakeSlot(webhook.Slots{}, "a2", "e", nil, nil, t0)
	if seed := evs[0].(*webhook.SlotsSeeded); seed.EndpointIDs == nil {
		t.Fatal("nil seed")
	}
}

func TestSlotLimit(t *testing.T) {
	var s webhook.Slots
	for i := range webhook.MaxEndpoints {
		evs, err := webhook.TakeSlot(s, "a1", fmt.Sprint("e", i), nil, nil, t0)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		s = foldSlots(s, evs)
	}
	if _, err := webhook.TakeSlot(s, "a1", "e10", nil, nil, t0); !errors.Is(err, webhook.ErrEndpointLimit) {
		t.Fatalf("11th slot: %v", err)
	}
	// Taking a slot already held decides nothing more.
	if evs, err := webhook.TakeSlot(s, "a1", "e3", nil, nil, t0); err != nil || len(evs) != 0 {
		t.Fatalf("retake: %+v %v", evs, err)
	}
	// A deleted endpoint frees its slot.
	s = foldSlots(s, webhook.FreeSlot(s, "a1", "e3", t0))
	if evs := webhook.FreeSlot(s, "a1", "e3", t0); len(evs) != 0 {
		t.Fatal("freed twice")
	}
	if _, err := webhook.TakeSlot(s, "a1", "e10", nil, nil, t0); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

func TestStaleSlotsCountOnlyWithTheirEndpoint(t *testing.T) {
	var s webhook.Slots
	for i := range webhook.MaxEndpoints {
		evs, _ := webhook.TakeSlot(s, "a1", fmt.Sprint("e", i), nil, nil, t0)
		s = foldSlots(s, evs)
	}
	// Within the grace, every slot counts whatever its endpoint shows.
	early := t0.Add(webhook.SlotGrace - time.Second)
	if got := s.Stale(early); len(got) != 0 {
		t.Fatalf("stale within the grace: %v", got)
	}
	if _, err := webhook.TakeSlot(s, "a1", "x", nil, map[string]bool{}, early); !errors.Is(err, webhook.ErrEndpointLimit) {
		t.Fatalf("a fresh slot did not count: %v", err)
	}
	// After it, a slot whose endpoint never came (or was deleted) is freed.
	later := t0.Add(webhook.SlotGrace)
	live := map[string]bool{}
	for _, id := range s.Stale(later) {
		live[id] = id != "e4" && id != "e7"
	}
	if len(live) != webhook.MaxEndpoints {
		t.Fatalf("stale %v", live)
	}
	evs, err := webhook.TakeSlot(s, "a1", "x", nil, live, later)
	if err != nil {
		t.Fatal(err)
	}
	var freed []string
	for _, e := range evs {
		if f, ok := e.(*webhook.SlotFreed); ok {
			freed = append(freed, f.EndpointID)
		}
	}
	if fmt.Sprint(freed) != "[e4 e7]" {
		t.Fatalf("freed %v of %+v", freed, evs)
	}
	if s = foldSlots(s, evs); len(s.Held) != webhook.MaxEndpoints-1 {
		t.Fatalf("held %d", len(s.Held))
	}
}

// An account with ten endpoints from before slots existed cannot take an
// eleventh.
func TestEndpointsFromBeforeSlotsCountTowardsTheLimit(t *testing.T) {
	existing := make([]string, 10)
	live := map[string]bool{}
	for i := range existing {
		existing[i] = fmt.Sprint("old", i)
		live[existing[i]] = true
	}
	if _, err := webhook.TakeSlot(webhook.Slots{}, "a1", "new", existing, live, t0); !errors.Is(err, webhook.ErrEndpointLimit) {
		t.Fatalf("an 11th endpoint beside 10 from before slots: %v", err)
	}
}
