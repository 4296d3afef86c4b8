package commands

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/internal/eventstore"
)

const webhooksProjection = "webhooks"

// SecretPrefix starts every webhook signing secret.
const SecretPrefix = "whsec_"

// sealSecret mints a signing secret and seals it for the endpoint.
func (s *Service) sealSecret(endpointID string) (secret, sealed string) {
	secret = credential.Mint(SecretPrefix).Secret
	return secret, s.box.Seal([]byte(secret), SecretContext(endpointID))
}

// SecretContext binds a sealed signing secret to its endpoint.
func SecretContext(endpointID string) string { return "webhook:" + endpointID }

// checkURL runs the egress policy on a webhook URL.
func (s *Service) checkURL(ctx context.Context, url *string) error {
	if url == nil {
		return nil
	}
	var v domain.ValidationError
	if *url == "" {
		v.Add("url", "is required")
	} else if err := s.egress.CheckURL(ctx, *url); err != nil {
		v.Add("url", "%s", err.Error())
	}
	return v.OrNil()
}

// Webhook returns an endpoint's state from its stream.
func (s *Service) Webhook(ctx context.Context, id string) (webhook.State, error) {
	if _, err := uuid.Parse(id); err != nil {
		return webhook.State{}, domain.ErrNotFound
	}
	st, _, err := load(ctx, s.store, webhook.Stream(id), webhook.Evolve)
	return st, err
}

// CreateWebhook creates an endpoint and returns it with its secret. The
// request is validated first; then a slot is taken on the account's slots
// stream, where racing creates meet, and only then is the endpoint's own
// stream created.
func (s *Service) CreateWebhook(ctx context.Context, accountID string, in webhook.Settings, meta Meta) (webhook.State, string, error) {
	if in.URL == nil {
		empty := ""
		in.URL = &empty
	}
	if err := webhook.ValidateSettings(in); err != nil {
		return webhook.State{}, "", err
	}
	if err := s.checkURL(ctx, in.URL); err != nil {
		return webhook.State{}, "", err
	}
	id := uuid.NewString()
	if err := s.takeSlot(ctx, accountID, id, meta); err != nil {
		return webhook.State{}, "", err
	}
	secret, sealed := s.sealSecret(id)
	evs, err := execute(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.Create(st, id, accountID, in, sealed, s.now())
	}, meta, webhooksProjection)
	if err != nil {
		// The slot is not freed here: the append may have been recorded
		// after all. One whose endpoint never came is free after
		// webhook.SlotGrace.
		return webhook.State{}, "", err
	}
	return fold(webhook.State{}, webhook.Evolve, evs), secret, nil
}

// takeSlot takes one of the account's endpoint slots for endpointID. A
// slots stream that has not started is seeded with the endpoints the read
// model shows, made before slots were recorded; a slot older than
// webhook.SlotGrace counts only if its endpoint's stream shows it alive.
func (s *Service) takeSlot(ctx context.Context, accountID, endpointID string, meta Meta) error {
	_, err := execute(ctx, s, webhook.SlotsStream(accountID), webhook.EvolveSlots, func(sl webhook.Slots) ([]domain.Event, error) {
		now := s.now()
		var existing []string
		if !sl.Seeded {
			ids, err := s.endpointIDs(ctx, accountID)
			if err != nil {
				return nil, err
			}
			existing = ids
		}
		live := map[string]bool{}
		for _, id := range sl.Stale(now) {
			st, err := s.Webhook(ctx, id)
			if err != nil {
				return nil, err
			}
			live[id] = st.Exists()
		}
		return webhook.TakeSlot(sl, accountID, endpointID, existing, live, now)
	}, meta)
	if errors.Is(err, webhook.ErrEndpointLimit) {
		return &LimitError{Detail: err.Error()}
	}
	return err
}

// freeSlot releases a deleted endpoint's slot. Callers ignore its error: a
// slot whose endpoint is gone is freed by the next create after
// webhook.SlotGrace.
func (s *Service) freeSlot(ctx context.Context, accountID, endpointID string, meta Meta) error {
	_, err := execute(ctx, s, webhook.SlotsStream(accountID), webhook.EvolveSlots, func(sl webhook.Slots) ([]domain.Event, error) {
		return webhook.FreeSlot(sl, accountID, endpointID, s.now()), nil
	}, meta)
	return err
}

// LimitError is a request refused because an account limit is reached.
type LimitError struct{ Detail string }

func (e *LimitError) Error() string { return e.Detail }

// OwnWebhook reports domain.ErrNotFound unless id is an endpoint of the
// account: routes ask it before reading or judging a request's body, so an
// unknown or another account's id is a 404 whatever the body holds.
func (s *Service) OwnWebhook(ctx context.Context, accountID, id string) error {
	st, err := s.Webhook(ctx, id)
	if err != nil {
		return err
	}
	if !st.Exists() || st.AccountID != accountID {
		return domain.ErrNotFound
	}
	return nil
}

// UpdateWebhook applies a PATCH: the endpoint is found before the
// settings are judged.
func (s *Service) UpdateWebhook(ctx context.Context, accountID, id string, in webhook.Settings, active *bool, meta Meta) error {
	if err := s.OwnWebhook(ctx, accountID, id); err != nil {
		return err
	}
	if err := webhook.ValidateSettings(in); err != nil {
		return err
	}
	if err := s.checkURL(ctx, in.URL); err != nil {
		return err
	}
	_, err := execute(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.Update(st, accountID, in, active, s.now())
	}, meta, webhooksProjection)
	return err
}

// RotateWebhookSecret replaces the signing secret; deliveries from now on
// are signed with the new one only.
func (s *Service) RotateWebhookSecret(ctx context.Context, accountID, id string, meta Meta) (string, error) {
	if _, err := uuid.Parse(id); err != nil {
		return "", domain.ErrNotFound
	}
	secret, sealed := s.sealSecret(id)
	_, err := execute(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.RotateSecret(st, accountID, sealed, s.now())
	}, meta, webhooksProjection)
	return secret, err
}

// DeleteWebhook removes an endpoint; its pending retries stop, its
// delivery history goes with it, and its slot is free for another.
func (s *Service) DeleteWebhook(ctx context.Context, accountID, id string, meta Meta) error {
	if _, err := uuid.Parse(id); err != nil {
		return domain.ErrNotFound
	}
	_, err := execute(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.Delete(st, accountID, s.now())
	}, meta, webhooksProjection)
	if err != nil {
		return err
	}
	s.freeSlot(ctx, accountID, id, meta)
	return nil
}

// Envelope is the body of every webhook delivery.
type Envelope struct {
	Type      string         `json:"type"`
	CreatedAt string         `json:"created_at"`
	Data      map[string]any `json:"data"`
}

// TestWebhook queues a sample email.delivered event for an active endpoint.
func (s *Service) TestWebhook(ctx context.Context, accountID, id string, meta Meta) (string, error) {
	st, err := s.Webhook(ctx, id)
	if err != nil {
		return "", err
	}
	if !st.Exists() || st.AccountID != accountID {
		return "", domain.ErrNotFound
	}
	if !st.Active {
		return "", &domain.ConflictError{Code: "endpoint_inactive", Detail: "the endpoint is not active; resume it first"}
	}
	now := s.now()
	emailID := uuid.NewString()
	payload, err := json.Marshal(Envelope{Type: "email.delivered", CreatedAt: now.UTC().Format("2006-01-02T15:04:05.000Z"), Data: map[string]any{
		"email_id": emailID, "from": "Mailroom <test@mailroom.dev>", "to": "delivered@example.com",
		"subject": "Test event from Mailroom", "tags": map[string]string{"test": "true"},
	}})
	if err != nil {
		return "", err
	}
	deliveryID := uuid.NewString()
	pos, err := s.CreateDelivery(ctx, delivery.Created{DeliveryID: deliveryID, EndpointID: id, AccountID: accountID,
		EmailID: emailID, Type: "email.delivered", Payload: string(payload), CreatedAt: now}, meta)
	if err == nil {
		s.settle(ctx, pos, webhooksProjection)
	}
	return deliveryID, err
}

// CreateDelivery records a delivery of an event to an endpoint; the same
// delivery twice is recorded once. It does not wait for the read model;
// the position lets the caller wait once for several.
func (s *Service) CreateDelivery(ctx context.Context, c delivery.Created, meta Meta) (eventstore.Position, error) {
	_, pos, err := executeAt(ctx, s, delivery.Stream(c.DeliveryID), delivery.Evolve, func(st delivery.State) ([]domain.Event, error) {
		return delivery.Create(st, c), nil
	}, meta)
	return pos, err
}

// RecordSkippedDelivery records a delivery of an event to an endpoint
// disabled after consecutive failures: failed at once, unattempted, and
// marked for sending when the endpoint is recovered.
func (s *Service) RecordSkippedDelivery(ctx context.Context, c delivery.Created, meta Meta) (eventstore.Position, error) {
	_, pos, err := executeAt(ctx, s, delivery.Stream(c.DeliveryID), delivery.Evolve, func(st delivery.State) ([]domain.Event, error) {
		return delivery.CreateSkipped(st, c, s.now()), nil
	}, meta)
	return pos, err
}

// ExpireDelivery fails a pending delivery held by its inactive endpoint
// (disabled after failures when disabled is true) once it is older than
// delivery.HoldCap; otherwise it does nothing.
func (s *Service) ExpireDelivery(ctx context.Context, id string, disabled bool, meta Meta) error {
	_, err := execute(ctx, s, delivery.Stream(id), delivery.Evolve, func(st delivery.State) ([]domain.Event, error) {
		return delivery.Expire(st, disabled, s.now()), nil
	}, meta)
	return err
}

// Delivery returns a delivery's state from its stream.
func (s *Service) Delivery(ctx context.Context, id string) (delivery.State, error) {
	st, _, err := load(ctx, s.store, delivery.Stream(id), delivery.Evolve)
	return st, err
}

// RecordDeliveryAttempt records the outcome of attempt number attempt; if
// the stream shows that attempt recorded already, nothing happens. It
// returns the delivery's new state.
func (s *Service) RecordDeliveryAttempt(ctx context.Context, id string, attempt int, o delivery.Outcome,
	schedule []time.Duration, jitter float64, meta Meta) (delivery.State, error) {
	var final delivery.State
	_, err := execute(ctx, s, delivery.Stream(id), delivery.Evolve, func(st delivery.State) ([]domain.Event, error) {
		final = st
		if st.Attempts+1 != attempt {
			return nil, nil
		}
		evs := delivery.RecordAttempt(st, o, schedule, jitter, s.now())
		final = fold(st, delivery.Evolve, evs)
		return evs, nil
	}, meta)
	return final, err
}

// RecordEndpointOutcome counts a finished delivery against its endpoint.
func (s *Service) RecordEndpointOutcome(ctx context.Context, endpointID, deliveryID string, succeeded bool, meta Meta) error {
	_, err := execute(ctx, s, webhook.Stream(endpointID), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.RecordOutcome(st, deliveryID, succeeded, s.now()), nil
	}, meta)
	return err
}
