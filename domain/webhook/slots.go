package webhook

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mailroom/mailroom/domain"
)

// SlotsStream holds an account's endpoint slots: the write-side count
// behind MaxEndpoints. Creates take a slot on it with optimistic
// concurrency before the endpoint's own stream exists, so racing creates
// meet there and the limit holds.
func SlotsStream(accountID string) string { return "webhookslots-" + accountID }

// Slot events.
type (
	// SlotsSeeded starts the stream with the endpoints the account had
	// before slots were recorded.
	SlotsSeeded struct {
		AccountID   string    `json:"account_id"`
		EndpointIDs []string  `json:"endpoint_ids"`
		SeededAt    time.Time `json:"seeded_at"`
	}
	SlotTaken struct {
		AccountID  string    `json:"account_id"`
		EndpointID string    `json:"endpoint_id"`
		TakenAt    time.Time `json:"taken_at"`
	}
	SlotFreed struct {
		AccountID  string    `json:"account_id"`
		EndpointID string    `json:"endpoint_id"`
		FreedAt    time.Time `json:"freed_at"`
	}
)

func (*SlotsSeeded) EventType() string { return "WebhookSlotsSeeded" }
func (*SlotTaken) EventType() string   { return "WebhookSlotTaken" }
func (*SlotFreed) EventType() string   { return "WebhookSlotFreed" }

// SlotGrace is how long a slot counts whatever its endpoint's stream shows:
// the endpoint is appended just after its slot. A slot whose create crashed
// in between is free again after this long.
const SlotGrace = time.Minute

// ErrEndpointLimit refuses a create beyond MaxEndpoints.
var ErrEndpointLimit = fmt.Errorf("an account may hold at most %d webhook endpoints; delete one first", MaxEndpoints)

// Slots is an account's slots as their events left them.
type Slots struct {
	Seeded bool
	Held   map[string]time.Time // endpoint id → when its slot was taken
}

// EvolveSlots applies a slot event.
func EvolveSlots(s Slots, e domain.Event) Slots {
	switch e := e.(type) {
	case *SlotsSeeded:
		held := maps.Clone(s.Held)
		if held == nil {
			held = map[string]time.Time{}
		}
		for _, id := range e.EndpointIDs {
			held[id] = e.SeededAt
		}
		s.Seeded, s.Held = true, held
	case *SlotTaken:
		held := maps.Clone(s.Held)
		if held == nil {
			held = map[string]time.Time{}
		}
		held[e.EndpointID] = e.TakenAt
		s.Seeded, s.Held = true, held
	case *SlotFreed:
		held := maps.Clone(s.Held)
		delete(held, e.EndpointID)
		s.Held = held
	}
	return s
}

// Stale lists, in order, the endpoints whose slots are older than
// SlotGrace: they count only while their endpoint exists.
func (s Slots) Stale(now time.Time) []string {
	var out []string
	for id, at := range s.Held {
		if now.Sub(at) >= SlotGrace {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// TakeSlot decides a slot for a new endpoint. existing are the account's
// endpoints from before slots were recorded, used only to seed a stream
// that has not started; live tells which endpoints of stale slots exist.
// Slots of endpoints that do not exist are freed on the way; beyond
// MaxEndpoints the answer is ErrEndpointLimit. Taking a slot the endpoint
// holds decides nothing more.
func TakeSlot(s Slots, accountID, endpointID string, existing []string, live map[string]bool, now time.Time) ([]domain.Event, error) {
	var evs []domain.Event
	if !s.Seeded {
		seed := &SlotsSeeded{AccountID: accountID, EndpointIDs: slices.Clone(existing), SeededAt: now}
		if seed.EndpointIDs == nil {
			seed.EndpointIDs = []string{}
		}
		evs = append(evs, seed)
		s = EvolveSlots(s, seed)
	}
	if _, ok := s.Held[endpointID]; ok {
		return evs, nil // taken already
	}
	for _, id := range s.Stale(now) {
		if !live[id] {
			freed := &SlotFreed{AccountID: accountID, EndpointID: id, FreedAt: now}
			evs = append(evs, freed)
			s = EvolveSlots(s, freed)
		}
	}
	if len(s.Held) >= MaxEndpoints {
		return nil, ErrEndpointLimit
	}
	return append(evs, &SlotTaken{AccountID: accountID, EndpointID: endpointID, TakenAt: now}), nil
}

// FreeSlot decides releasing a deleted endpoint's slot; a slot not held
// decides nothing.
func FreeSlot(s Slots, accountID, endpointID string, now time.Time) []domain.Event {
	if _, ok := s.Held[endpointID]; !ok {
		return nil
	}
	return []domain.Event{&SlotFreed{AccountID: accountID, EndpointID: endpointID, FreedAt: now}}
}
