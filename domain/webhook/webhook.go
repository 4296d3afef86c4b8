// Package webhook is the aggregate of a webhook endpoint: where an
// account's email events are posted, which of them, signed with which
// secret, and whether it is active, paused or disabled after failing.
package webhook

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mailroom/mailroom/domain"
	whsig "github.com/mailroom/mailroom/webhook"
)

// EventTypes lists every event an endpoint may subscribe to.
var EventTypes = []string{whsig.TypeEmailSent, whsig.TypeEmailDelivered, whsig.TypeEmailOpened, whsig.TypeEmailClicked,
	whsig.TypeEmailBounced, whsig.TypeEmailComplained, whsig.TypeEmailFailed}

// Limits of an endpoint.
const (
	MaxEndpoints          = 10
	MaxDescription        = 200
	DisableAfterExhausted = 20
	ReasonFailures        = "consecutive_failures"
)

// maxReported bounds the errors one request gets back.
const maxReported = 10

// Stream is the endpoint's stream name.
func Stream(id string) string { return "webhook-" + id }

// Events.
type (
	Created struct {
		EndpointID   string    `json:"endpoint_id"`
		AccountID    string    `json:"account_id"`
		URL          string    `json:"url"`
		Description  string    `json:"description"`
		EventTypes   []string  `json:"event_types"`
		SealedSecret string    `json:"sealed_secret"`
		CreatedAt    time.Time `json:"created_at"`
	}
	Updated struct {
		EndpointID  string    `json:"endpoint_id"`
		URL         *string   `json:"url,omitempty"`
		Description *string   `json:"description,omitempty"`
		EventTypes  []string  `json:"event_types,omitempty"`
		UpdatedAt   time.Time `json:"updated_at"`
	}
	Paused struct {
		EndpointID string    `json:"endpoint_id"`
		PausedAt   time.Time `json:"paused_at"`
	}
	// Resumed reactivates a paused or disabled endpoint and clears its
	// failure count.
	Resumed struct {
		EndpointID string    `json:"endpoint_id"`
		ResumedAt  time.Time `json:"resumed_at"`
	}
	Disabled struct {
		EndpointID string    `json:"endpoint_id"`
		Reason     string    `json:"reason"`
		DisabledAt time.Time `json:"disabled_at"`
	}
	SecretRotated struct {
		EndpointID   string    `json:"endpoint_id"`
		SealedSecret string    `json:"sealed_secret"`
		RotatedAt    time.Time `json:"rotated_at"`
	}
	Deleted struct {
		EndpointID string    `json:"endpoint_id"`
		AccountID  string    `json:"account_id"`
		DeletedAt  time.Time `json:"deleted_at"`
	}
	// EventExhausted: an event's retries ran out; one more consecutive
	// failure.
	EventExhausted struct {
		EndpointID string    `json:"endpoint_id"`
		DeliveryID string    `json:"delivery_id"`
		At         time.Time `json:"at"`
	}
	// FailuresReset: a delivery succeeded after failures.
	FailuresReset struct {
		EndpointID string    `json:"endpoint_id"`
		DeliveryID string    `json:"delivery_id"`
		At         time.Time `json:"at"`
	}
)

func (*Created) EventType() string        { return "WebhookEndpointCreated" }
func (*Updated) EventType() string        { return "WebhookEndpointUpdated" }
func (*Paused) EventType() string         { return "WebhookEndpointPaused" }
func (*Resumed) EventType() string        { return "WebhookEndpointResumed" }
func (*Disabled) EventType() string       { return "WebhookEndpointDisabled" }
func (*SecretRotated) EventType() string  { return "WebhookSecretRotated" }
func (*Deleted) EventType() string        { return "WebhookEndpointDeleted" }
func (*EventExhausted) EventType() string { return "WebhookEventExhausted" }
func (*FailuresReset) EventType() string  { return "WebhookFailuresReset" }

// Events lists a fresh value of every event type of this aggregate.
func Events() []domain.Event {
	return []domain.Event{&Created{}, &Updated{}, &Paused{}, &Resumed{}, &Disabled{}, &SecretRotated{}, &Deleted{}, &EventExhausted{}, &FailuresReset{},
		&SlotsSeeded{}, &SlotTaken{}, &SlotFreed{}}
}

// State is the endpoint as its events left it.
type State struct {
	ID, AccountID, URL, Description string
	EventTypes                      []string
	SealedSecret                    string
	Active                          bool
	DisabledReason                  string
	ConsecutiveFailures             int
	Deleted                         bool
	CreatedAt                       time.Time
	counted                         map[string]bool // deliveries in the current failure run
}

// Exists reports whether the endpoint was created and not deleted.
func (s State) Exists() bool { return s.ID != "" && !s.Deleted }

// Subscribes reports whether the endpoint wants events of type t.
func (s State) Subscribes(t string) bool { return slices.Contains(s.EventTypes, t) }

// Evolve applies one event.
func Evolve(s State, e domain.Event) State {
	switch e := e.(type) {
	case *Created:
		s = State{ID: e.EndpointID, AccountID: e.AccountID, URL: e.URL, Description: e.Description,
			EventTypes: e.EventTypes, SealedSecret: e.SealedSecret, Active: true, CreatedAt: e.CreatedAt}
	case *Updated:
		if e.URL != nil {
			s.URL = *e.URL
		}
		if e.Description != nil {
			s.Description = *e.Description
		}
		if e.EventTypes != nil {
			s.EventTypes = e.EventTypes
		}
	case *Paused:
		s.Active = false
	case *Resumed:
		s.Active, s.DisabledReason, s.ConsecutiveFailures, s.counted = true, "", 0, nil
	case *Disabled:
		s.Active, s.DisabledReason = false, e.Reason
	case *SecretRotated:
		s.SealedSecret = e.SealedSecret
	case *Deleted:
		s.Deleted = true
	case *EventExhausted:
		s.ConsecutiveFailures++
		counted := make(map[string]bool, len(s.counted)+1)
		for k := range s.counted {
			counted[k] = true
		}
		counted[e.DeliveryID] = true
		s.counted = counted
	case *FailuresReset:
		s.ConsecutiveFailures, s.counted = 0, nil
	}
	return s
}

// Settings are the fields a create or update sets; nil means unchanged
// (update) or the default (create).
type Settings struct {
	URL         *string
	Description *string
	EventTypes  []string
	TypesGiven  bool // event_types was present in the request
}

// ValidateSettings checks descriptions, event types and that the URL can be
// stored; whether it may be reached is the egress policy's decision, which
// needs the network.
func ValidateSettings(in Settings) error {
	var v domain.ValidationError
	if in.URL != nil {
		if p := domain.URLProblem(*in.URL); p != "" {
			v.Add("url", "%s", p)
		}
	}
	if in.Description != nil {
		if n := utf8.RuneCountInString(*in.Description); n > MaxDescription {
			v.Add("description", "must be at most %d characters; got %d", MaxDescription, n)
		} else {
			v.CheckLine("description", *in.Description)
		}
	}
	if in.TypesGiven {
		if len(in.EventTypes) == 0 {
			v.Add("event_types", "must list at least one event type")
		}
		for i, t := range in.EventTypes {
			if len(v.Errors) >= maxReported {
				break
			}
			if !slices.Contains(EventTypes, t) {
				// Unknown types are named as given, so they must be printable.
				if p := domain.TextProblem(t, false); p != "" {
					v.Add(fmt.Sprintf("event_types.%d", i), "%s", p)
					continue
				}
				v.Add(fmt.Sprintf("event_types.%d", i), "unknown event type %q; known: %s", t, strings.Join(EventTypes, ", "))
			}
		}
	}
	return v.OrNil()
}

// normalizeTypes de-duplicates in the canonical order; nil means all.
func normalizeTypes(in []string) []string {
	if in == nil {
		return slices.Clone(EventTypes)
	}
	var out []string
	for _, t := range EventTypes {
		if slices.Contains(in, t) {
			out = append(out, t)
		}
	}
	return out
}

// Create decides a new endpoint.
func Create(s State, id, accountID string, in Settings, sealedSecret string, now time.Time) ([]domain.Event, error) {
	if s.ID != "" {
		return nil, &domain.ConflictError{Code: "endpoint_exists", Detail: "endpoint already exists"}
	}
	if err := ValidateSettings(in); err != nil {
		return nil, err
	}
	desc := ""
	if in.Description != nil {
		desc = *in.Description
	}
	var types []string
	if in.TypesGiven {
		types = in.EventTypes
	}
	return []domain.Event{&Created{EndpointID: id, AccountID: accountID, URL: *in.URL, Description: desc,
		EventTypes: normalizeTypes(types), SealedSecret: sealedSecret, CreatedAt: now}}, nil
}

func owned(s State, accountID string) error {
	if !s.Exists() || (accountID != "" && s.AccountID != accountID) {
		return domain.ErrNotFound
	}
	return nil
}

// Update decides a PATCH: settings and, when active is not nil, pause or
// resume.
func Update(s State, accountID string, in Settings, active *bool, now time.Time) ([]domain.Event, error) {
	if err := owned(s, accountID); err != nil {
		return nil, err
	}
	if err := ValidateSettings(in); err != nil {
		return nil, err
	}
	var evs []domain.Event
	if in.URL != nil || in.Description != nil || in.TypesGiven {
		u := &Updated{EndpointID: s.ID, URL: in.URL, Description: in.Description, UpdatedAt: now}
		if in.TypesGiven {
			u.EventTypes = normalizeTypes(in.EventTypes)
		}
		evs = append(evs, u)
	}
	if active != nil {
		switch {
		case *active && (!s.Active || s.ConsecutiveFailures > 0):
			evs = append(evs, &Resumed{EndpointID: s.ID, ResumedAt: now})
		case !*active && s.Active:
			evs = append(evs, &Paused{EndpointID: s.ID, PausedAt: now})
		}
	}
	return evs, nil
}

// RotateSecret decides a new signing secret, effective at once.
func RotateSecret(s State, accountID, sealedSecret string, now time.Time) ([]domain.Event, error) {
	if err := owned(s, accountID); err != nil {
		return nil, err
	}
	return []domain.Event{&SecretRotated{EndpointID: s.ID, SealedSecret: sealedSecret, RotatedAt: now}}, nil
}

// Delete decides removing the endpoint.
func Delete(s State, accountID string, now time.Time) ([]domain.Event, error) {
	if err := owned(s, accountID); err != nil {
		return nil, err
	}
	return []domain.Event{&Deleted{EndpointID: s.ID, AccountID: s.AccountID, DeletedAt: now}}, nil
}

// RecordOutcome decides what a finished delivery means for the endpoint: a
// success clears the failure count; an exhausted event adds one, and the
// 20th in a row disables an active endpoint.
func RecordOutcome(s State, deliveryID string, succeeded bool, now time.Time) []domain.Event {
	if !s.Exists() {
		return nil
	}
	if succeeded {
		if s.ConsecutiveFailures == 0 {
			return nil
		}
		return []domain.Event{&FailuresReset{EndpointID: s.ID, DeliveryID: deliveryID, At: now}}
	}
	if s.counted[deliveryID] {
		return nil // counted already
	}
	evs := []domain.Event{&EventExhausted{EndpointID: s.ID, DeliveryID: deliveryID, At: now}}
	if s.ConsecutiveFailures+1 >= DisableAfterExhausted && s.Active {
		evs = append(evs, &Disabled{EndpointID: s.ID, Reason: ReasonFailures, DisabledAt: now})
	}
	return evs
}
