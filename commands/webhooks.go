package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
	whsig "github.com/mailroom/mailroom/webhook"
)

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
func (s *Service) checkURL(ctx context.Context, raw *string) error {
	if raw == nil {
		return nil
	}
	var v domain.ValidationError
	if u, err := url.Parse(*raw); *raw == "" {
		v.Add("url", "is required")
	} else if err == nil && u.Host == "" && u.Opaque == "" {
		// "hooks.example.com/mailroom" is read as a path without a host.
		v.Add("url", "must be an https URL with a host, like https://hooks.example.com/mailroom")
	} else if err := s.checkURLField(ctx, &v, "url", *raw); err != nil {
		return err
	}
	return v.OrNil()
}

// validateWebhook judges in's fields and its URL's egress policy together,
// so that a request wrong in several fields hears of all of them at once.
// The policy is not run on a URL its field already refused, and a lookup
// that got no answer leaves a field refusal standing.
func (s *Service) validateWebhook(ctx context.Context, in webhook.Settings) error {
	err := webhook.ValidateSettings(in)
	var v *domain.ValidationError
	if err != nil && !errors.As(err, &v) {
		return err
	}
	if v != nil && slices.ContainsFunc(v.Errors, func(f domain.FieldError) bool { return f.Field == "url" }) {
		return v
	}
	uerr := s.checkURL(ctx, in.URL)
	var uv *domain.ValidationError
	switch {
	case v == nil:
		return uerr
	case errors.As(uerr, &uv):
		v.Errors = append(uv.Errors, v.Errors...) // url first, as ValidateSettings lists it
	}
	return v
}

// Webhook returns an endpoint's state from its stream.
func (s *Service) Webhook(ctx context.Context, id string) (webhook.State, error) {
	if _, err := uuid.Parse(id); err != nil {
		return webhook.State{}, domain.ErrNotFound
	}
	st, _, err := load(ctx, s, webhook.Stream(id), webhook.Evolve)
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
	if err := s.validateWebhook(ctx, in); err != nil {
		return webhook.State{}, "", err
	}
	id := uuid.NewString()
	if err := s.takeSlot(ctx, accountID, id, meta); err != nil {
		return webhook.State{}, "", err
	}
	secret, sealed := s.sealSecret(id)
	evs, err := execute(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.Create(st, id, accountID, in, sealed, s.now())
	}, meta, projections.WebhooksName)
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
	if err := s.validateWebhook(ctx, in); err != nil {
		return err
	}
	// Confirmed, as a pause stops deliveries and the answer shows the
	// endpoint as the write left it; repeating a PATCH is harmless.
	_, err := executeConfirmed(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.Update(st, accountID, in, active, s.now())
	}, meta, projections.WebhooksName)
	return err
}

// RotateWebhookSecret replaces the signing secret; deliveries from now on
// are signed with the new one only.
func (s *Service) RotateWebhookSecret(ctx context.Context, accountID, id string, meta Meta) (string, error) {
	if _, err := uuid.Parse(id); err != nil {
		return "", domain.ErrNotFound
	}
	secret, sealed := s.sealSecret(id)
	// Confirmed: once the answer gives the new secret, every delivery is
	// signed with it. Not visible in time, the secret is not shown; the
	// next rotation replaces it.
	_, err := executeConfirmed(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.RotateSecret(st, accountID, sealed, s.now())
	}, meta, projections.WebhooksName)
	if err != nil {
		return "", err
	}
	return secret, nil
}

// DeleteWebhook removes an endpoint; its pending retries stop, its
// delivery history goes with it, and its slot is free for another.
func (s *Service) DeleteWebhook(ctx context.Context, accountID, id string, meta Meta) error {
	if _, err := uuid.Parse(id); err != nil {
		return domain.ErrNotFound
	}
	// Confirmed: events stop reaching the endpoint once the answer says
	// it is gone.
	_, err := executeConfirmed(ctx, s, webhook.Stream(id), webhook.Evolve, func(st webhook.State) ([]domain.Event, error) {
		return webhook.Delete(st, accountID, s.now())
	}, meta, projections.WebhooksName)
	if errors.Is(err, domain.ErrNotFound) {
		st, _, _, last, lerr := loadSpan(ctx, s, webhook.Stream(id), webhook.Evolve)
		if lerr == nil && st.Deleted && st.AccountID == accountID {
			return s.goneYet(ctx, last, projections.WebhooksName)
		}
	}
	if err != nil && !errors.Is(err, ErrNotVisible) {
		return err
	}
	s.freeSlot(ctx, accountID, id, meta)
	return err
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
	payload, err := json.Marshal(whsig.Event{Type: whsig.TypeEmailDelivered, CreatedAt: now, Data: whsig.EventData{
		EmailID: emailID, From: "Mailroom <test@mailroom.dev>", To: "delivered@example.com",
		Subject: "Test event from Mailroom", Tags: map[string]string{"test": "true"},
		Recipients: []string{"delivered@example.com"},
	}})
	if err != nil {
		return "", err
	}
	deliveryID := uuid.NewString()
	pos, err := s.CreateDelivery(ctx, delivery.Created{DeliveryID: deliveryID, EndpointID: id, AccountID: accountID,
		EmailID: emailID, Type: whsig.TypeEmailDelivered, Payload: string(payload), CreatedAt: now, Test: true}, meta)
	if err == nil {
		_ = s.settle(ctx, pos, projections.WebhooksName) // late or not, the test event is queued
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

// NewDelivery is one delivery of an event: Skipped when its endpoint was
// disabled after consecutive failures.
type NewDelivery struct {
	delivery.Created
	Skipped bool
}

// CreateDeliveries records an event's deliveries with one append. The same
// delivery twice is recorded once: when any of them exists already, each
// is decided on its own stream. Fresh tells which this call recorded; the
// position is the last one written, for the caller to wait on.
func (s *Service) CreateDeliveries(ctx context.Context, ds []NewDelivery, meta Meta) (fresh []bool, pos eventstore.Position, err error) {
	fresh = make([]bool, len(ds))
	parts := make([]eventstore.StreamAppend, len(ds))
	now := s.now()
	for i, d := range ds {
		data, err := codec.EncodeAll(decideNew(delivery.State{}, d, now), meta.metadata())
		if err != nil {
			return nil, pos, err
		}
		parts[i] = eventstore.StreamAppend{Stream: delivery.Stream(d.DeliveryID), Expected: eventstore.NoStream, Events: data}
	}
	res, err := s.store.AppendMany(ctx, parts...)
	if err == nil {
		for i, r := range res {
			fresh[i] = true
			if pos.Less(r.Position) {
				pos = r.Position
			}
		}
		return fresh, pos, nil
	}
	if !eventstore.IsConflict(err) {
		return nil, pos, err
	}
	// A redelivered event, or a store that appends stream by stream.
	for i, d := range ds {
		evs, at, err := executeAt(ctx, s, delivery.Stream(d.DeliveryID), delivery.Evolve, func(st delivery.State) ([]domain.Event, error) {
			return decideNew(st, d, s.now()), nil
		}, meta)
		if err != nil {
			return nil, pos, err
		}
		fresh[i] = len(evs) > 0
		if pos.Less(at) {
			pos = at
		}
	}
	return fresh, pos, nil
}

// Created is a delivery's state and stream version as CreateDeliveries
// leaves one it recorded fresh and unskipped, so that its first attempt
// need not read the stream back.
func Created(c delivery.Created) (delivery.State, eventstore.ExpectedVersion) {
	evs := delivery.Create(delivery.State{}, c)
	return fold(delivery.State{}, delivery.Evolve, evs), eventstore.Exact(uint64(len(evs) - 1))
}

func decideNew(st delivery.State, d NewDelivery, now time.Time) []domain.Event {
	if d.Skipped {
		return delivery.CreateSkipped(st, d.Created, now)
	}
	return delivery.Create(st, d.Created)
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

// DropDelivery ends a pending delivery, unattempted, when its stream reads
// with its email erased or, with emailErased, when the email's erasure is
// recorded; otherwise it does nothing. The endpoint's failures are not
// counted: the receiver was never asked.
func (s *Service) DropDelivery(ctx context.Context, id string, emailErased bool, meta Meta) error {
	_, err := execute(ctx, s, delivery.Stream(id), delivery.Evolve, func(st delivery.State) ([]domain.Event, error) {
		return delivery.Drop(st, emailErased, s.now()), nil
	}, meta)
	return err
}

// DropUnsubscribedDelivery ends a pending delivery whose endpoint no longer
// subscribes to its event's type, unattempted.
func (s *Service) DropUnsubscribedDelivery(ctx context.Context, id string, meta Meta) error {
	_, err := execute(ctx, s, delivery.Stream(id), delivery.Evolve, func(st delivery.State) ([]domain.Event, error) {
		return delivery.DropUnsubscribed(st, s.now()), nil
	}, meta)
	return err
}

// Delivery returns a delivery's state from its stream, and the expected
// version an append after it must meet.
func (s *Service) Delivery(ctx context.Context, id string) (delivery.State, eventstore.ExpectedVersion, error) {
	return load(ctx, s, delivery.Stream(id), delivery.Evolve)
}

// RecordAttempt records the outcome of the attempt after st (read at
// expected) with one append: the delivery's event and, only when the
// endpoint's failure count changes, the endpoint's. An endpoint known
// clean (no failures counted, by the read model) is not read for a
// success. If another attempt was recorded meanwhile, nothing is. It
// returns the delivery's new state, and whether this attempt disabled the
// endpoint.
func (s *Service) RecordAttempt(ctx context.Context, st delivery.State, expected eventstore.ExpectedVersion, o delivery.Outcome,
	schedule []time.Duration, jitter float64, endpointClean bool, meta Meta) (delivery.State, bool, error) {
	for attempt := 1; ; attempt++ {
		now := s.now()
		evs := delivery.RecordAttempt(st, o, schedule, jitter, now)
		if len(evs) == 0 {
			return st, false, nil
		}
		final := fold(st, delivery.Evolve, evs)
		data, err := codec.EncodeAll(evs, meta.metadata())
		if err != nil {
			return st, false, err
		}
		disabled := false
		var parts []eventstore.StreamAppend
		if final.Status == delivery.Failed || (final.Status == delivery.Delivered && !endpointClean) {
			ep, epExpected, err := load(ctx, s, webhook.Stream(st.Created.EndpointID), webhook.Evolve)
			if err != nil {
				return st, false, err
			}
			if epEvs := webhook.RecordOutcome(ep, st.Created.DeliveryID, final.Status == delivery.Delivered, now); len(epEvs) > 0 {
				epData, err := codec.EncodeAll(epEvs, meta.metadata())
				if err != nil {
					return st, false, err
				}
				disabled = ep.Active && !fold(ep, webhook.Evolve, epEvs).Active
				// The endpoint's part goes first: deciding it again is a
				// no-op, so a store appending stream by stream can repeat it.
				parts = append(parts, eventstore.StreamAppend{Stream: webhook.Stream(ep.ID), Expected: epExpected, Events: epData})
			}
		}
		parts = append(parts, eventstore.StreamAppend{Stream: delivery.Stream(st.Created.DeliveryID), Expected: expected, Events: data})
		_, err = s.store.AppendMany(ctx, parts...)
		if eventstore.IsConflict(err) && attempt < maxAttempts {
			time.Sleep(time.Duration(rand.IntN(1000*attempt)) * time.Microsecond)
			cur, curExpected, err := s.Delivery(ctx, st.Created.DeliveryID)
			if err != nil {
				return st, false, err
			}
			if cur.Attempts != st.Attempts || cur.Status != st.Status {
				return cur, false, nil // recorded meanwhile
			}
			st, expected, endpointClean = cur, curExpected, false
			continue
		}
		if err != nil {
			return st, false, fmt.Errorf("record attempt of %s: %w", st.Created.DeliveryID, err)
		}
		return final, disabled, nil
	}
}
