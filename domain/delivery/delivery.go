// Package delivery is the aggregate of one webhook delivery: one event for
// one endpoint, tried until the receiver accepts it or the retry schedule
// runs out. Its id is stable across retries (the service-delivery-id).
package delivery

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mailroom/mailroom/domain"
)

// Status of a delivery.
type Status string

const (
	Pending   Status = "pending"
	Delivered Status = "delivered"
	Failed    Status = "failed"
)

// DefaultSchedule is the wait before each retry after the first attempt:
// six retries over about 5 hours 12 minutes.
var DefaultSchedule = []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute, 90 * time.Minute, 3 * time.Hour}

const streamPrefix = "delivery-"

// Stream is the delivery's stream name.
func Stream(id string) string { return streamPrefix + id }

// IDFromStream is the id of the delivery whose stream is stream; ok is false
// for a stream of anything else.
func IDFromStream(stream string) (id string, ok bool) { return strings.CutPrefix(stream, streamPrefix) }

// Events.
type (
	Created struct {
		DeliveryID string    `json:"delivery_id"`
		EndpointID string    `json:"endpoint_id"`
		AccountID  string    `json:"account_id"`
		EmailID    string    `json:"email_id"`
		Type       string    `json:"event_type"` // e.g. email.delivered
		Payload    string    `json:"payload"`    // the envelope, exactly as it is posted
		CreatedAt  time.Time `json:"created_at"`
		// Erased: the payload spoke of an email whose personal data was
		// destroyed; Payload reads empty and the delivery is not made.
		Erased bool `json:"erased,omitempty"`
		// Test: asked for with the test route, whatever the endpoint's
		// event types (absent from deliveries recorded before it existed).
		Test bool `json:"test,omitempty"`
	}
	AttemptSucceeded struct {
		DeliveryID     string    `json:"delivery_id"`
		EndpointID     string    `json:"endpoint_id"`
		Attempt        int       `json:"attempt"`
		ResponseStatus int       `json:"response_status"`
		At             time.Time `json:"at"`
	}
	// Skipped: the delivery was recorded for an endpoint disabled after
	// consecutive failures and failed at once, unattempted; re-enabling the
	// endpoint does not send it (it is listed as failed).
	Skipped struct {
		DeliveryID string    `json:"delivery_id"`
		EndpointID string    `json:"endpoint_id"`
		Reason     string    `json:"reason"`
		Error      string    `json:"error"`
		At         time.Time `json:"at"`
	}
	// Expired: the delivery waited longer than HoldCap for its paused or
	// disabled endpoint and failed without another attempt.
	Expired struct {
		DeliveryID string    `json:"delivery_id"`
		EndpointID string    `json:"endpoint_id"`
		Error      string    `json:"error"`
		At         time.Time `json:"at"`
	}
	// Dropped: the delivery was pending when its email's personal data was
	// erased (ReasonEmailErased), or when its endpoint stopped subscribing
	// to its event's type (ReasonUnsubscribed; drops recorded before that
	// reason existed are all ReasonEmailErased). It ends unattempted,
	// neither delivered nor a failure of its endpoint.
	Dropped struct {
		DeliveryID string    `json:"delivery_id"`
		EndpointID string    `json:"endpoint_id"`
		Reason     string    `json:"reason"`
		At         time.Time `json:"at"`
	}
	// AttemptFailed: NextAttemptAt is zero when the schedule is exhausted
	// and the delivery has failed.
	AttemptFailed struct {
		DeliveryID     string    `json:"delivery_id"`
		EndpointID     string    `json:"endpoint_id"`
		Attempt        int       `json:"attempt"`
		ResponseStatus *int      `json:"response_status"`
		Error          string    `json:"error"`
		At             time.Time `json:"at"`
		NextAttemptAt  time.Time `json:"next_attempt_at,omitzero"`
	}
)

func (*Created) EventType() string          { return "WebhookDeliveryCreated" }
func (*AttemptSucceeded) EventType() string { return "WebhookAttemptSucceeded" }
func (*AttemptFailed) EventType() string    { return "WebhookAttemptFailed" }
func (*Skipped) EventType() string          { return "WebhookDeliverySkipped" }
func (*Expired) EventType() string          { return "WebhookDeliveryExpired" }
func (*Dropped) EventType() string          { return "WebhookDeliveryDropped" }

// Events lists a fresh value of every event type of this aggregate.
func Events() []domain.Event {
	return []domain.Event{&Created{}, &AttemptSucceeded{}, &AttemptFailed{}, &Skipped{}, &Expired{}, &Dropped{}}
}

// ReasonEndpointDisabled is the reason of a delivery skipped because its
// endpoint was disabled after consecutive failures.
const ReasonEndpointDisabled = "endpoint_disabled"

// ReasonEmailErased is the reason of a delivery dropped because its
// email's personal data was erased.
const ReasonEmailErased = "email_erased"

// ReasonUnsubscribed is the reason of a delivery dropped because its
// endpoint no longer subscribes to its event's type.
const ReasonUnsubscribed = "unsubscribed"

// DroppedError is what the delivery log says of a delivery dropped because
// its email was erased.
const DroppedError = "not delivered: the email's personal data was erased"

// DropError is what the delivery log says of a delivery dropped for
// reason.
func DropError(reason string) string {
	if reason == ReasonUnsubscribed {
		return "not delivered: the endpoint no longer subscribes to this event type"
	}
	return DroppedError
}

// HoldCap is how long a delivery waits for its paused (or disabled)
// endpoint, counted from its event: longer, and it fails instead of
// reaching the receiver days late.
const HoldCap = 72 * time.Hour

// State is the delivery as its events left it.
type State struct {
	Created  *Created
	Status   Status
	Attempts int
	NextAt   time.Time
}

// Evolve applies one event.
func Evolve(s State, e domain.Event) State {
	switch e := e.(type) {
	case *Created:
		s = State{Created: e, Status: Pending, NextAt: e.CreatedAt}
	case *AttemptSucceeded:
		s.Status, s.Attempts, s.NextAt = Delivered, e.Attempt, time.Time{}
	case *AttemptFailed:
		s.Attempts, s.NextAt = e.Attempt, e.NextAttemptAt
		if e.NextAttemptAt.IsZero() {
			s.Status = Failed
		}
	case *Skipped, *Expired, *Dropped:
		s.Status, s.NextAt = Failed, time.Time{}
	}
	return s
}

// Create decides a new delivery; an existing one (the same event for the
// same endpoint), or one whose email is erased, decides nothing.
func Create(s State, c Created) []domain.Event {
	if s.Created != nil || c.Erased {
		return nil
	}
	return []domain.Event{&c}
}

// CreateSkipped decides a new delivery for an endpoint disabled after
// consecutive failures: recorded, so that the delivery log lists it, and
// failed at once without an attempt.
func CreateSkipped(s State, c Created, now time.Time) []domain.Event {
	if s.Created != nil || c.Erased {
		return nil
	}
	return []domain.Event{&c, &Skipped{DeliveryID: c.DeliveryID, EndpointID: c.EndpointID, Reason: ReasonEndpointDisabled,
		Error: "endpoint disabled after consecutive failures", At: now}}
}

// Expire decides failing a pending delivery whose endpoint is inactive
// (paused, or disabled when disabled is true) once its event is older
// than HoldCap. A younger one, or one that ended, decides nothing.
func Expire(s State, disabled bool, now time.Time) []domain.Event {
	if s.Created == nil || s.Status != Pending || now.Sub(s.Created.CreatedAt) <= HoldCap {
		return nil
	}
	why := "paused"
	if disabled {
		why = "disabled"
	}
	return []domain.Event{&Expired{DeliveryID: s.Created.DeliveryID, EndpointID: s.Created.EndpointID,
		Error: fmt.Sprintf("held longer than %dh while the endpoint was %s", int(HoldCap.Hours()), why), At: now}}
}

// Drop decides ending a pending delivery unattempted because its email's
// personal data was erased: read with Erased (its payload is gone), or,
// with emailErased, because the email's erasure is recorded (a process may
// still hold the destroyed key for a while). It is never sent. One that is
// not pending, or whose email is not erased, decides nothing.
func Drop(s State, emailErased bool, now time.Time) []domain.Event {
	if s.Created == nil || s.Status != Pending || !(s.Created.Erased || emailErased) {
		return nil
	}
	return []domain.Event{&Dropped{DeliveryID: s.Created.DeliveryID, EndpointID: s.Created.EndpointID, Reason: ReasonEmailErased, At: now}}
}

// DropUnsubscribed decides ending a pending delivery unattempted because
// its endpoint no longer subscribes to its event's type: the retries of
// an event the receiver said it does not want would go on for hours, and
// count against the endpoint. It counts neither way for the endpoint.
func DropUnsubscribed(s State, now time.Time) []domain.Event {
	if s.Created == nil || s.Status != Pending {
		return nil
	}
	return []domain.Event{&Dropped{DeliveryID: s.Created.DeliveryID, EndpointID: s.Created.EndpointID, Reason: ReasonUnsubscribed, At: now}}
}

// Due reports whether the delivery should be attempted at now.
func (s State) Due(now time.Time) bool {
	return s.Created != nil && s.Status == Pending && !now.Before(s.NextAt)
}

// Outcome of one attempt. ResponseStatus is nil when no response came.
// RetryAfter is the wait a 429 or 503 answer asked for, if any.
type Outcome struct {
	ResponseStatus *int
	Error          string
	RetryAfter     time.Duration
}

// Succeeded reports a 2xx answer.
func (o Outcome) Succeeded() bool {
	return o.ResponseStatus != nil && *o.ResponseStatus >= 200 && *o.ResponseStatus < 300
}

// RecordAttempt decides what an attempt means. jitter, in [-1, 1], spreads
// the retry by up to 10 %. A receiver's Retry-After longer than the
// schedule's wait is honoured, up to the schedule's longest wait, so a
// receiver cannot park a delivery for days; it never shortens the wait.
// The attempt after the last retry fails the delivery.
func RecordAttempt(s State, o Outcome, schedule []time.Duration, jitter float64, now time.Time) []domain.Event {
	if s.Created == nil || s.Status != Pending {
		return nil
	}
	n := s.Attempts + 1
	id, ep := s.Created.DeliveryID, s.Created.EndpointID
	if o.Succeeded() {
		return []domain.Event{&AttemptSucceeded{DeliveryID: id, EndpointID: ep, Attempt: n, ResponseStatus: *o.ResponseStatus, At: now}}
	}
	f := &AttemptFailed{DeliveryID: id, EndpointID: ep, Attempt: n, ResponseStatus: o.ResponseStatus, Error: o.Error, At: now}
	if n <= len(schedule) {
		wait := schedule[n-1]
		wait += time.Duration(float64(wait) * 0.1 * max(-1, min(1, jitter)))
		if asked := min(o.RetryAfter, slices.Max(schedule)); asked > wait {
			wait = asked
		}
		f.NextAttemptAt = now.Add(wait)
	}
	return []domain.Event{f}
}
