package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
)

// Event types Mailroom delivers.
const (
	TypeEmailSent       = "email.sent"
	TypeEmailDelivered  = "email.delivered"
	TypeEmailOpened     = "email.opened"
	TypeEmailClicked    = "email.clicked"
	TypeEmailBounced    = "email.bounced"
	TypeEmailComplained = "email.complained"
	TypeEmailFailed     = "email.failed"
)

// Event is the JSON envelope of every delivery; Mailroom writes it with
// this same type. Decoding ignores unknown fields, so receivers keep
// working when Mailroom adds some.
type Event struct {
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      EventData `json:"data"`
}

// MarshalJSON writes created_at in UTC with milliseconds, as every
// timestamp of Mailroom's API.
func (e Event) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type      string    `json:"type"`
		CreatedAt string    `json:"created_at"`
		Data      EventData `json:"data"`
	}{e.Type, e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"), e.Data})
}

// EventData is the envelope's data: the email's fields, present for every
// type, then those of particular types.
type EventData struct {
	EmailID string            `json:"email_id"`
	From    string            `json:"from"`
	To      string            `json:"to"`
	Subject string            `json:"subject"`
	Tags    map[string]string `json:"tags"`

	BounceType    string `json:"bounce_type,omitempty"`    // email.bounced
	BounceSubtype string `json:"bounce_subtype,omitempty"` // email.bounced
	Link          string `json:"link,omitempty"`           // email.clicked
	// Recipients are the addresses a delivery, bounce or complaint
	// concerns (those of email.delivered, email.bounced and
	// email.complained), of to, cc and bcc alike: with several
	// recipients, the email's to does not say which of them it was.
	Recipients []string `json:"recipients,omitempty"`
	Reason     string   `json:"reason,omitempty"` // email.failed
}

// MaxBodyBytes caps the body Handler reads.
const MaxBodyBytes = 1 << 20

// Handler returns an http.Handler that receives Mailroom's deliveries. It
// reads the raw body (at most MaxBodyBytes), verifies it with Verify and
// DefaultTolerance, decodes the Event and calls fn with the request's
// context and the service-delivery-id.
//
// Responses: 401 when the signature does not verify, 400 when a verified
// delivery cannot be decoded or lacks its delivery id, 500 when fn returns
// an error (so Mailroom retries), 204 when fn returns nil. Response bodies
// carry a short reason only: neither verification details nor fn's error.
//
// fn may see the same delivery more than once; it should deduplicate on
// deliveryID and be safe to call concurrently.
//
// Handler panics when secret is empty or fn is nil, so that a receiver
// whose secret is not configured fails at start rather than refusing
// every delivery.
func Handler(secret string, fn func(ctx context.Context, deliveryID string, ev Event) error) http.Handler {
	if secret == "" {
		panic("webhook: Handler with empty secret")
	}
	if fn == nil {
		panic("webhook: Handler with nil fn")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			} else {
				http.Error(w, "cannot read body", http.StatusBadRequest)
			}
			return
		}
		if err := Verify(secret, r.Header.Get(HeaderSignature), body, DefaultTolerance); err != nil {
			http.Error(w, reason(err), http.StatusUnauthorized)
			return
		}
		id := r.Header.Get(HeaderDeliveryID)
		if id == "" {
			http.Error(w, "missing "+HeaderDeliveryID+" header", http.StatusBadRequest)
			return
		}
		var ev Event
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "invalid event JSON", http.StatusBadRequest)
			return
		}
		if err := fn(r.Context(), id, ev); err != nil {
			http.Error(w, "event not processed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// reason is the short text of a 401: which check failed, nothing more.
func reason(err error) string {
	switch {
	case errors.Is(err, ErrMissingHeader):
		return "missing signature"
	case errors.Is(err, ErrMalformedHeader):
		return "malformed signature"
	case errors.Is(err, ErrTimestampOutOfTolerance):
		return "signature timestamp out of tolerance"
	default:
		return "invalid signature"
	}
}
