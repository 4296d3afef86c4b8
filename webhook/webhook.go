// Package webhook signs Mailroom's webhook deliveries and verifies them on
// the receiving side. Receivers import it; Mailroom uses [Sign] to produce
// the service-signature header.
//
// Every delivery is a POST whose JSON body is an [Event] envelope, with three
// headers: service-signature ("t=<unix seconds>,v1=<hex>"), service-event-type
// and service-delivery-id. v1 is HMAC-SHA-256, keyed with the endpoint's whole
// secret including its "whsec_" prefix, of "<t>.<raw body>".
//
// A receiver must:
//
//   - verify against the raw body bytes, never a re-encoded one;
//   - answer 401 when the signature does not verify, 2xx once the event is
//     safely handled, and anything else to have Mailroom retry later;
//   - deduplicate on service-delivery-id, which stays the same across retries;
//   - order events by created_at, as deliveries can arrive in any order.
//
// [Handler] does the first two; the callback does the rest:
//
//	secret := os.Getenv("MAILROOM_WEBHOOK_SECRET") // "whsec_..."
//	http.Handle("POST /mailroom", webhook.Handler(secret,
//		func(ctx context.Context, deliveryID string, ev webhook.Event) error {
//			if seen(ctx, deliveryID) {
//				return nil // a retry of something already handled
//			}
//			// Apply ev unless a newer event (by ev.CreatedAt) already
//			// updated ev.Data.EmailID.
//			return apply(ctx, deliveryID, ev) // an error makes Mailroom retry
//		}))
//
// Receivers with their own HTTP stack call [Verify] on the raw body instead:
//
//	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//	if err == nil {
//		err = webhook.Verify(secret, r.Header.Get(webhook.HeaderSignature), body, webhook.DefaultTolerance)
//	}
//	if err != nil {
//		http.Error(w, "invalid signature", http.StatusUnauthorized)
//		return
//	}
//
// Only the timestamp and the body are signed; the service-event-type and
// service-delivery-id headers are not. The body's "type" is authoritative.
// A captured delivery replayed within the tolerance verifies again, under
// any delivery id the replayer sets: a receiver that must never act twice
// also deduplicates on the event (type, data.email_id, created_at), or
// keeps the signatures it accepted for the tolerance (a replay repeats its
// signature; a retry is signed anew).
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names as Mailroom sends them (Go's http.Header canonicalises them
// on lookup, so r.Header.Get works with these constants).
const (
	HeaderSignature  = "service-signature"
	HeaderEventType  = "service-event-type"
	HeaderDeliveryID = "service-delivery-id"

	// DefaultTolerance is how far a signature's timestamp may be from the
	// receiver's clock, either way, before it is refused as a replay.
	DefaultTolerance = 300 * time.Second
)

// Verification errors. Verify wraps them with detail for logs; match with
// errors.Is.
var (
	ErrMissingHeader           = errors.New("webhook: missing signature header")
	ErrMalformedHeader         = errors.New("webhook: malformed signature header")
	ErrTimestampOutOfTolerance = errors.New("webhook: signature timestamp outside tolerance")
	ErrNoValidSignature        = errors.New("webhook: no valid signature")
	// ErrEmptySecret guards against a receiver whose secret is not
	// configured: an empty HMAC key would let anyone forge signatures.
	ErrEmptySecret = errors.New("webhook: empty secret")
)

// maxUnix (9999-12-31T23:59:59Z) bounds a header timestamp so that
// converting it to time.Time cannot overflow.
const maxUnix = 253402300799

// Sign returns the service-signature header value "t=<unix>,v1=<hex>" for
// body sent at t, keyed with secret exactly as given (whsec_ prefix included).
func Sign(secret string, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// mac is HMAC-SHA-256(secret, "<ts>.<body>").
func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks that header (the service-signature value) signs body with
// secret and that its timestamp is within tolerance of the current time;
// a tolerance of zero or less means DefaultTolerance. See VerifyAt.
func Verify(secret, header string, body []byte, tolerance time.Duration) error {
	return VerifyAt(secret, header, body, tolerance, time.Now())
}

// VerifyAt is Verify with the clock given as now.
//
// The header holds comma-separated key=value pairs: exactly one t (unix
// seconds) and one or more v1 signatures. It verifies when any v1 matches,
// so several may be sent at once; pairs of other schemes are ignored.
// A header with no v1 at all is malformed.
func VerifyAt(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if secret == "" {
		return ErrEmptySecret
	}
	if strings.TrimSpace(header) == "" {
		return ErrMissingHeader
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}

	var ts string
	var sigs []string
	for item := range strings.SplitSeq(header, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("%w: %q is not key=value", ErrMalformedHeader, item)
		}
		switch strings.TrimSpace(k) {
		case "t":
			if ts != "" {
				return fmt.Errorf("%w: more than one t", ErrMalformedHeader)
			}
			ts = strings.TrimSpace(v)
			if ts == "" {
				return fmt.Errorf("%w: empty t", ErrMalformedHeader)
			}
		case "v1":
			sigs = append(sigs, strings.TrimSpace(v))
		}
	}
	if ts == "" {
		return fmt.Errorf("%w: no t", ErrMalformedHeader)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no v1 signature", ErrMalformedHeader)
	}
	// Digits only: no sign, no spaces, so the signed "<t>" is unambiguous.
	if strings.TrimLeft(ts, "0123456789") != "" {
		return fmt.Errorf("%w: t is not unix seconds", ErrMalformedHeader)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec > maxUnix {
		return fmt.Errorf("%w: t=%s", ErrTimestampOutOfTolerance, ts)
	}
	// Compare signed differences, not an absolute value, so a saturated
	// Sub cannot wrap around.
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: t=%s is %s from now, tolerance %s", ErrTimestampOutOfTolerance, ts, d.Round(time.Second), tolerance)
	}

	// The MAC covers the timestamp exactly as it appears in the header.
	want := mac(secret, ts, body)
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err != nil {
			continue // cannot match; keep looking
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrNoValidSignature
}
