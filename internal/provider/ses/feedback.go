package ses

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
)

// Feedback is one SES event mapped onto Mailroom.
type Feedback struct {
	// EmailID comes from the mailroom_email_id message tag; empty when the
	// event carries no such tag (e.g. identity feedback notifications, which
	// SES publishes without tags). Such feedback cannot be told apart from
	// another sender's on the same queue, so it is not recorded.
	EmailID string
	// MessageID is the SES message id (mail.messageId).
	MessageID string
	// EventType is SES's eventType (or notificationType).
	EventType string
	// Event is email.Delivered, Bounced, Complained, Opened or Clicked;
	// nil when Reject is set or Ignored is true. A complaint with
	// complaintSubType OnAccountSuppressionList is a Bounced (Permanent,
	// OnAccountSuppressionList): SES did not send to those recipients.
	// Its FeedbackID is derived from the SES message id, the event type,
	// the event's timestamp and its recipients (and link, for clicks), so
	// an SQS redelivery of the same document yields the same id.
	Event domain.Event
	// Reject is SES's reason for a Reject or Rendering Failure event: SES did
	// not deliver the message, and the caller fails the email with it.
	Reject *string
	// Ignored marks events that change nothing in Mailroom (Send,
	// DeliveryDelay, Subscription, SNS subscription messages, SES's setup
	// notices and unknown event types).
	Ignored bool
	// SubscribeURL confirms the subscription an SNS
	// SubscriptionConfirmation asks about; the operator opens it.
	SubscribeURL string
}

// snsEnvelope is the part of an SNS notification ParseFeedback reads.
type snsEnvelope struct {
	Type         string `json:"Type"`
	Message      string `json:"Message"`
	Timestamp    string `json:"Timestamp"`    // when SNS published it
	SubscribeURL string `json:"SubscribeURL"` // of a SubscriptionConfirmation
}

type sesEvent struct {
	EventType        string `json:"eventType"`
	NotificationType string `json:"notificationType"`
	Mail             struct {
		Timestamp   string              `json:"timestamp"`
		MessageID   string              `json:"messageId"`
		Destination []string            `json:"destination"`
		Tags        map[string][]string `json:"tags"`
	} `json:"mail"`
	Bounce *struct {
		BounceType        string      `json:"bounceType"`
		BounceSubType     string      `json:"bounceSubType"`
		BouncedRecipients []recipient `json:"bouncedRecipients"`
		Timestamp         string      `json:"timestamp"`
		FeedbackID        string      `json:"feedbackId"`
	} `json:"bounce"`
	Complaint *struct {
		ComplainedRecipients  []recipient `json:"complainedRecipients"`
		ComplaintFeedbackType string      `json:"complaintFeedbackType"`
		ComplaintSubType      string      `json:"complaintSubType"`
		Timestamp             string      `json:"timestamp"`
		FeedbackID            string      `json:"feedbackId"`
	} `json:"complaint"`
	Delivery *struct {
		Timestamp  string   `json:"timestamp"`
		Recipients []string `json:"recipients"`
	} `json:"delivery"`
	Open *struct {
		Timestamp string `json:"timestamp"`
		UserAgent string `json:"userAgent"`
		IPAddress string `json:"ipAddress"`
	} `json:"open"`
	Click *struct {
		Timestamp string `json:"timestamp"`
		Link      string `json:"link"`
		IPAddress string `json:"ipAddress"`
	} `json:"click"`
	Reject *struct {
		Reason string `json:"reason"`
	} `json:"reject"`
	Failure *struct {
		ErrorMessage string `json:"errorMessage"`
		TemplateName string `json:"templateName"`
	} `json:"failure"`
}

type recipient struct {
	EmailAddress string `json:"emailAddress"`
}

// ParseFeedback parses an SQS message body from the events queue: an SNS
// notification ({"Type":"Notification","Message":"<SES event JSON>"}) or,
// with SNS raw message delivery, the SES event itself (configuration-set
// event publishing format; the identity notification format with
// notificationType is read the same way, but carries no email id). It
// returns one Feedback per SES event. An error means the body can never be
// parsed (redelivery won't help); its text never quotes the body, so it
// may be logged.
func ParseFeedback(body []byte) ([]Feedback, error) {
	if topicValidation(body) {
		return []Feedback{{EventType: topicValidationType, Ignored: true}}, nil
	}
	var probe struct {
		snsEnvelope
		EventType        string `json:"eventType"`
		NotificationType string `json:"notificationType"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, notJSON("feedback", err)
	}
	published := ""
	switch {
	case probe.EventType != "" || probe.NotificationType != "":
		// A raw SES event (raw message delivery).
	case probe.Type == "Notification" && topicValidation([]byte(probe.Message)):
		return []Feedback{{EventType: topicValidationType, Ignored: true}}, nil
	case probe.Type == "Notification":
		body, published = []byte(probe.Message), probe.Timestamp
	case probe.Type == "SubscriptionConfirmation" || probe.Type == "UnsubscribeConfirmation":
		return []Feedback{{EventType: "SNS " + probe.Type, Ignored: true, SubscribeURL: probe.SubscribeURL}}, nil
	default:
		return nil, errors.New("ses: feedback is neither an SNS notification nor an SES event")
	}
	var ev sesEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, notJSON("SES event", err)
	}
	f, err := mapEvent(&ev, published)
	if err != nil {
		return nil, err
	}
	return []Feedback{f}, nil
}

// SES's setup notices, which reach the events queue but are no events:
// SNS publishes topicValidationText (plain text) when a configuration set's
// event destination is created on its topic, and an identity notification
// topic receives subscriptionSucceeded (a notification without mail).
const (
	topicValidationText   = "Successfully validated SNS topic for Amazon SES event publishing"
	topicValidationType   = "SNS topic validation"
	subscriptionSucceeded = "AmazonSnsSubscriptionSucceeded"
)

// topicValidation reports whether message is SES's notice that it
// validated the topic, wrapped by SNS or (raw message delivery) alone.
func topicValidation(message []byte) bool {
	return strings.HasPrefix(strings.TrimSpace(string(message)), topicValidationText)
}

// notJSON says why what could not be decoded by the kind of error and its
// offset only: json's own text may quote part of the document (a character,
// a number), and feedback documents name recipients.
func notJSON(what string, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("ses: %s is not JSON (syntax error at byte %d)", what, syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Errorf("ses: %s is not of the expected shape (a value of the wrong type at byte %d)", what, typ.Offset)
	}
	return fmt.Errorf("ses: %s is not JSON (%T)", what, err)
}

// mapEvent maps one SES event; published is when SNS published it, the
// last resort for the event's time (empty with raw message delivery).
func mapEvent(ev *sesEvent, published string) (Feedback, error) {
	typ := ev.EventType
	if typ == "" {
		typ = ev.NotificationType
	}
	if typ == "" {
		return Feedback{}, errors.New("ses: SES event without eventType")
	}
	if typ == subscriptionSucceeded {
		return Feedback{EventType: typ, Ignored: true}, nil
	}
	f := Feedback{EventType: typ, MessageID: ev.Mail.MessageID}
	if tags := ev.Mail.Tags[EmailIDTag]; len(tags) > 0 {
		f.EmailID = tags[0]
	}
	if f.MessageID == "" && typ != "Subscription" {
		// The type is not named: an unknown one is whatever the document says.
		return Feedback{}, errors.New("ses: event without mail.messageId")
	}
	switch typ {
	case "Delivery":
		if ev.Delivery == nil {
			return Feedback{}, errors.New("ses: Delivery event without delivery object")
		}
		at, err := eventTime(typ, ev.Delivery.Timestamp, ev.Mail.Timestamp, published)
		if err != nil {
			return Feedback{}, err
		}
		rcpts := sorted(ev.Delivery.Recipients)
		f.Event = &email.Delivered{
			EmailID: f.EmailID, FeedbackID: feedbackID(f.MessageID, typ, at, rcpts),
			Recipients: rcpts, OccurredAt: at,
		}
	case "Bounce":
		if ev.Bounce == nil {
			return Feedback{}, errors.New("ses: Bounce event without bounce object")
		}
		at, err := eventTime(typ, ev.Bounce.Timestamp, ev.Mail.Timestamp, published)
		if err != nil {
			return Feedback{}, err
		}
		rcpts := addresses(ev.Bounce.BouncedRecipients)
		f.Event = &email.Bounced{
			EmailID: f.EmailID, FeedbackID: feedbackID(f.MessageID, typ, at, rcpts),
			BounceType: ev.Bounce.BounceType, BounceSubtype: ev.Bounce.BounceSubType,
			Recipients: rcpts, OccurredAt: at,
		}
	case "Complaint":
		if ev.Complaint == nil {
			return Feedback{}, errors.New("ses: Complaint event without complaint object")
		}
		at, err := eventTime(typ, ev.Complaint.Timestamp, ev.Mail.Timestamp, published)
		if err != nil {
			return Feedback{}, err
		}
		rcpts := addresses(ev.Complaint.ComplainedRecipients)
		if ev.Complaint.ComplaintSubType == suppressedSubtype {
			// SES sent nothing to these addresses (they are on the
			// account's suppression list) and no one complained: the same
			// outcome as a bounce of a suppressed address. The id is
			// derived as for any complaint, so a document recorded as one
			// before is still recognised when SQS delivers it again.
			f.Event = &email.Bounced{
				EmailID: f.EmailID, FeedbackID: feedbackID(f.MessageID, typ, at, rcpts),
				BounceType: "Permanent", BounceSubtype: suppressedSubtype,
				Recipients: rcpts, OccurredAt: at,
			}
			break
		}
		f.Event = &email.Complained{
			EmailID: f.EmailID, FeedbackID: feedbackID(f.MessageID, typ, at, rcpts),
			FeedbackType: ev.Complaint.ComplaintFeedbackType, Recipients: rcpts, OccurredAt: at,
		}
	case "Open":
		if ev.Open == nil {
			return Feedback{}, errors.New("ses: Open event without open object")
		}
		at, err := eventTime(typ, ev.Open.Timestamp, ev.Mail.Timestamp, published)
		if err != nil {
			return Feedback{}, err
		}
		f.Event = &email.Opened{
			EmailID: f.EmailID, FeedbackID: feedbackID(f.MessageID, typ, at, []string{ev.Open.IPAddress, ev.Open.UserAgent}),
			UserAgent: ev.Open.UserAgent, OccurredAt: at,
		}
	case "Click":
		if ev.Click == nil {
			return Feedback{}, errors.New("ses: Click event without click object")
		}
		at, err := eventTime(typ, ev.Click.Timestamp, ev.Mail.Timestamp, published)
		if err != nil {
			return Feedback{}, err
		}
		f.Event = &email.Clicked{
			EmailID: f.EmailID, FeedbackID: feedbackID(f.MessageID, typ, at, []string{ev.Click.Link, ev.Click.IPAddress}),
			Link: ev.Click.Link, OccurredAt: at,
		}
	case "Reject":
		reason := "rejected by SES"
		if ev.Reject != nil && ev.Reject.Reason != "" {
			reason = ev.Reject.Reason
		}
		f.Reject = &reason
	case "Rendering Failure":
		reason := "SES rendering failure"
		if ev.Failure != nil && ev.Failure.ErrorMessage != "" {
			reason = ev.Failure.ErrorMessage
		}
		f.Reject = &reason
	default: // Send, DeliveryDelay, Subscription and anything new.
		f.Ignored = true
	}
	storable(&f)
	return f, nil
}

// storable replaces NUL (JSON's \u0000), which PostgreSQL stores in no
// text or jsonb, in the texts f's event and reject reason keep; else the
// email's projection could not take the event. The feedback id stays the
// document's own.
func storable(f *Feedback) {
	clean := func(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
	cleanAll := func(ss []string) []string {
		for i, s := range ss {
			ss[i] = clean(s)
		}
		sort.Strings(ss)
		return ss
	}
	switch e := f.Event.(type) {
	case *email.Delivered:
		e.Recipients = cleanAll(e.Recipients)
	case *email.Bounced:
		e.BounceType, e.BounceSubtype, e.Recipients = clean(e.BounceType), clean(e.BounceSubtype), cleanAll(e.Recipients)
	case *email.Complained:
		e.FeedbackType, e.Recipients = clean(e.FeedbackType), cleanAll(e.Recipients)
	case *email.Opened:
		e.UserAgent = clean(e.UserAgent)
	case *email.Clicked:
		e.Link = clean(e.Link)
	}
	if f.Reject != nil {
		r := clean(*f.Reject)
		f.Reject = &r
	}
}

// suppressedSubtype is SES's complaintSubType for a message it accepted but
// did not send because the address is on the account's suppression list,
// and the bounceSubType of the bounce it reports for such an address.
const suppressedSubtype = "OnAccountSuppressionList"

// feedbackID is a stable id for one SES event: the same document always
// gives the same id, different events of one message give different ids.
func feedbackID(messageID, eventType string, at time.Time, parts []string) string {
	h := sha256.New()
	h.Write([]byte(messageID + "\x00" + eventType + "\x00" + at.UTC().Format(time.RFC3339Nano)))
	for _, p := range parts {
		h.Write([]byte("\x00" + p))
	}
	return "ses_" + hex.EncodeToString(h.Sum(nil))[:32]
}

// eventTime is the first of candidates that is a time. An event without
// one cannot be placed on its email's timeline (its status depends on when
// things happened) and SES always sends one, so such a document is refused
// rather than dated at the year 1 or at its arrival (which would differ
// between redeliveries of the same document). A time outside the years 0
// to 9999 in UTC is no time: an event's JSON cannot carry it, and the
// document would fail to be recorded on every redelivery.
func eventTime(typ string, candidates ...string) (time.Time, error) {
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, c); err == nil && t.UTC().Year() >= 0 && t.UTC().Year() <= 9999 {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("ses: %s event without a valid timestamp", typ)
}

func addresses(rs []recipient) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.EmailAddress)
	}
	return sorted(out)
}

func sorted(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, strings.TrimSpace(s))
	}
	sort.Strings(out)
	return out
}
