// Package email is the aggregate of one sent message: accepted (queued),
// scanned by the content gateway, handed to the provider (sent), and then
// the provider's feedback. Status follows a precedence over the events'
// own times (Progress), so the order in which feedback arrives never
// changes it.
package email

import (
	"strings"
	"time"

	"github.com/mailroom/mailroom/domain"
)

// Status of an email.
type Status string

const (
	StatusQueued     Status = "queued"
	StatusSent       Status = "sent"
	StatusDelivered  Status = "delivered"
	StatusOpened     Status = "opened"
	StatusClicked    Status = "clicked"
	StatusBounced    Status = "bounced"
	StatusComplained Status = "complained"
	StatusFailed     Status = "failed"
)

// Failure reasons of emails that never leave the service.
const (
	ReasonBlockedAttachment   = "blocked_attachment_type"
	ReasonMalware             = "malware_detected"
	ReasonAttachmentDownload  = "attachment_download_failed"
	ReasonSuppressed          = "suppressed"
	ReasonDomainRemoved       = "domain_removed"
	ReasonProviderRejected    = "provider_rejected"
	ReasonProviderUnavailable = "provider_unavailable"
	ReasonRenderingFailed     = "rendering_failed"
	ReasonAttachmentsTooLarge = "attachments_too_large"
	// ReasonInternalError is the service's own failure: the email's stored
	// content is lost, or what it needs besides the provider (its stores,
	// the content scanner, its signing key) kept failing for the send's
	// maximum age.
	ReasonInternalError = "internal_error"
)

// Reasons lists every failure reason.
var Reasons = []string{ReasonBlockedAttachment, ReasonMalware, ReasonAttachmentDownload, ReasonSuppressed, ReasonDomainRemoved,
	ReasonProviderRejected, ReasonProviderUnavailable, ReasonRenderingFailed, ReasonAttachmentsTooLarge, ReasonInternalError}

// IDTag is the tag that carries an email's id to a provider beside the
// message (an SES message tag), so that its feedback finds the email: no
// email's own tags may use the name.
const IDTag = "mailroom_email_id"

// Attachment is an attachment's metadata; its bytes live in blob storage
// under Digest. Path attachments have no digest until downloaded; their URL
// is sealed (it may be presigned), and Path keeps it without query or
// fragment. Emails queued before sealing have the whole URL in Path.
type Attachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	ContentID   string `json:"content_id,omitempty"`
	SizeBytes   int64  `json:"size_bytes"`
	Digest      string `json:"digest,omitempty"`
	Path        string `json:"path,omitempty"`
	SealedPath  string `json:"sealed_path,omitempty"`
}

// Addresses is a list of addresses, each as given (display name included).
// Emails queued before it was a list held reply_to as one string joined
// with ", "; the codec upcasts such records.
type Addresses []string

// Base64Size is the length of n bytes in padded standard base64: the
// measure of the attachment budget, inline or downloaded.
func Base64Size(n int64) int64 { return (n + 2) / 3 * 4 }

const streamPrefix = "email-"

// Stream is the email's stream name.
func Stream(id string) string { return streamPrefix + id }

// IDFromStream is the id of the email whose stream is stream; ok is false
// for a stream of anything else.
func IDFromStream(stream string) (id string, ok bool) { return strings.CutPrefix(stream, streamPrefix) }

// Events.
type (
	Queued struct {
		EmailID     string            `json:"email_id"`
		AccountID   string            `json:"account_id"`
		DomainID    string            `json:"domain_id"`
		From        string            `json:"from"`       // as given, display name included
		FromEmail   string            `json:"from_email"` // the address alone
		To          []string          `json:"to"`
		Cc          []string          `json:"cc,omitempty"`
		Bcc         []string          `json:"bcc,omitempty"`
		ReplyTo     Addresses         `json:"reply_to,omitempty"`
		Subject     string            `json:"subject"`
		HTMLDigest  string            `json:"html_digest,omitempty"`
		TextDigest  string            `json:"text_digest,omitempty"`
		Tags        map[string]string `json:"tags,omitempty"`
		Attachments []Attachment      `json:"attachments,omitempty"`
		RequestHash string            `json:"request_hash,omitempty"` // idempotency: the request's fingerprint
		QueuedAt    time.Time         `json:"queued_at"`
		// RecipientKeys are the keyed hashes of every recipient (AddressKey),
		// so that the email can be found by address after its personal data
		// is erased.
		RecipientKeys []string `json:"recipient_keys,omitempty"`
		// Erased: the email's personal data was destroyed; every field
		// marked personal in the codec reads as its zero value.
		Erased bool `json:"erased,omitempty"`
	}
	// Scanned: the content gateway passed the email; attachments downloaded.
	Scanned struct {
		EmailID     string       `json:"email_id"`
		Attachments []Attachment `json:"attachments,omitempty"`
		ScannedAt   time.Time    `json:"scanned_at"`
		Erased      bool         `json:"erased,omitempty"`
	}
	// Held: the account is suspended; the email waits, still queued.
	Held struct {
		EmailID   string    `json:"email_id"`
		AccountID string    `json:"account_id"`
		HeldAt    time.Time `json:"held_at"`
	}
	// Released: the account was reinstated; the email goes on.
	Released struct {
		EmailID    string    `json:"email_id"`
		ReleasedAt time.Time `json:"released_at"`
	}
	Sent struct {
		EmailID           string    `json:"email_id"`
		ProviderMessageID string    `json:"provider_message_id"`
		SentAt            time.Time `json:"sent_at"`
	}
	Failed struct {
		EmailID  string    `json:"email_id"`
		Reason   string    `json:"reason"`
		Detail   string    `json:"detail,omitempty"`
		FailedAt time.Time `json:"failed_at"`
		Erased   bool      `json:"erased,omitempty"`
	}
	Delivered struct {
		EmailID    string    `json:"email_id"`
		FeedbackID string    `json:"feedback_id"`
		Recipients []string  `json:"recipients,omitempty"`
		OccurredAt time.Time `json:"occurred_at"`
		Erased     bool      `json:"erased,omitempty"`
	}
	Bounced struct {
		EmailID       string    `json:"email_id"`
		FeedbackID    string    `json:"feedback_id"`
		BounceType    string    `json:"bounce_type"` // Permanent, Transient, Undetermined
		BounceSubtype string    `json:"bounce_subtype"`
		Recipients    []string  `json:"recipients,omitempty"`
		OccurredAt    time.Time `json:"occurred_at"`
		// RecipientKeys are the recipients' keyed hashes, which keep them
		// suppressed after their addresses are erased.
		RecipientKeys []string `json:"recipient_keys,omitempty"`
		Erased        bool     `json:"erased,omitempty"`
	}
	Complained struct {
		EmailID       string    `json:"email_id"`
		FeedbackID    string    `json:"feedback_id"`
		FeedbackType  string    `json:"feedback_type,omitempty"`
		Recipients    []string  `json:"recipients,omitempty"`
		OccurredAt    time.Time `json:"occurred_at"`
		RecipientKeys []string  `json:"recipient_keys,omitempty"`
		Erased        bool      `json:"erased,omitempty"`
	}
	Opened struct {
		EmailID    string    `json:"email_id"`
		FeedbackID string    `json:"feedback_id"`
		UserAgent  string    `json:"user_agent,omitempty"`
		OccurredAt time.Time `json:"occurred_at"`
		Erased     bool      `json:"erased,omitempty"`
	}
	Clicked struct {
		EmailID    string    `json:"email_id"`
		FeedbackID string    `json:"feedback_id"`
		Link       string    `json:"link"`
		OccurredAt time.Time `json:"occurred_at"`
		Erased     bool      `json:"erased,omitempty"`
	}
	// Erased: the email's personal data (its data key, bodies and
	// attachments) was destroyed, because the account's retention ran out
	// or on an erasure request. Nothing happens to the email afterwards.
	Erased struct {
		EmailID   string    `json:"email_id"`
		AccountID string    `json:"account_id"`
		Reason    string    `json:"reason"`               // ErasedByRetention or ErasedOnRequest
		ErasureID string    `json:"erasure_id,omitempty"` // the request, when on request
		ErasedAt  time.Time `json:"erased_at"`
	}
)

// Why an email was erased.
const (
	ErasedByRetention = "retention"
	ErasedOnRequest   = "request"
)

func (*Queued) EventType() string     { return "EmailQueued" }
func (*Scanned) EventType() string    { return "EmailScanned" }
func (*Held) EventType() string       { return "EmailHeld" }
func (*Released) EventType() string   { return "EmailReleased" }
func (*Sent) EventType() string       { return "EmailSent" }
func (*Failed) EventType() string     { return "EmailFailed" }
func (*Delivered) EventType() string  { return "EmailDelivered" }
func (*Bounced) EventType() string    { return "EmailBounced" }
func (*Complained) EventType() string { return "EmailComplained" }
func (*Opened) EventType() string     { return "EmailOpened" }
func (*Clicked) EventType() string    { return "EmailClicked" }
func (*Erased) EventType() string     { return "EmailErased" }

// Events lists a fresh value of every event type of this aggregate.
func Events() []domain.Event {
	return []domain.Event{&Queued{}, &Held{}, &Released{}, &Scanned{}, &Sent{}, &Failed{}, &Delivered{}, &Bounced{}, &Complained{}, &Opened{}, &Clicked{}, &Erased{}}
}

// Permanent reports whether a bounce type ends the email (and suppresses
// the recipients).
func Permanent(bounceType string) bool { return bounceType == "Permanent" }

// DataErased reports whether e was read with the email's personal data
// erased (its data key destroyed): its personal fields are empty.
func DataErased(e domain.Event) bool {
	switch e := e.(type) {
	case *Queued:
		return e.Erased
	case *Scanned:
		return e.Erased
	case *Failed:
		return e.Erased
	case *Delivered:
		return e.Erased
	case *Bounced:
		return e.Erased
	case *Complained:
		return e.Erased
	case *Opened:
		return e.Erased
	case *Clicked:
		return e.Erased
	}
	return false
}
