package ses

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// FuzzParseFeedback checks ParseFeedback on any body the events queue may
// hold: it never panics, its error never quotes the body (it is logged),
// a raw SES event reads the same as that event wrapped by SNS, and what it
// returns is whole and holds only text PostgreSQL can store (the email's
// projection and suppression list keep it).
func FuzzParseFeedback(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no SES documents in testdata: %v", err)
	}
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			f.Fatal(err)
		}
		// Smaller seeds mutate better: drop what ParseFeedback never reads.
		if mail, ok := doc["mail"].(map[string]any); ok {
			delete(mail, "headers")
			delete(mail, "commonHeaders")
			mail["tags"] = map[string]any{EmailIDTag: []any{"0190a5a4-9c1e-7000-8000-000000000000"}}
		}
		ev, _ := json.Marshal(doc)
		f.Add(ev)
		wrapped, _ := json.Marshal(map[string]string{"Type": "Notification", "Message": string(ev), "Timestamp": "2025-01-02T03:04:05.678Z"})
		f.Add(wrapped)
	}
	for _, s := range []string{
		topicValidationText,
		`{"Type":"Notification","Message":"` + topicValidationText + ` for configuration set x"}`,
		`{"Type":"SubscriptionConfirmation","Message":"You have chosen to subscribe","SubscribeURL":"https://sns.example/"}`,
		`{"Type":"UnsubscribeConfirmation"}`,
		`{"notificationType":"AmazonSnsSubscriptionSucceeded","message":"You have successfully subscribed"}`,
		`{"eventType":"Open","mail":{"messageId":"m","timestamp":"2025-01-02T03:04:05Z"},"open":{"userAgent":"UA\u00e9 zq9-private@example.org","ipAddress":"192.0.2.1"}}`,
		`{"eventType":"Open","mail":{"messageId":"m","timestamp":"2025-01-02T03:04:05Z"},"open":{"userAgent":"UA\u0000 zq9-private@example.org","ipAddress":"192.0.2.1"}}`,
		`{"eventType":"Reject","mail":{"messageId":"m"},"reject":{"reason":"\u0000"}}`,
		`{"eventType":"Bounce","mail":{"messageId":"m"},"bounce":{"bounceType":"Permanent","bouncedRecipients":[{"emailAddress":" zq9-private@example.org "},{"emailAddress":"a@b.c"}],"timestamp":"2025-01-02T03:04:05.1+01:00"}}`,
		`{"eventType":"Click","mail":{"messageId":"m","tags":{"mailroom_email_id":[]}},"click":{"link":"https://x.example/?a=1","timestamp":"bad"}}`,
		`{"eventType":"Reject","mail":{"messageId":"m"},"reject":{"reason":"Bad content"}}`,
		`{"eventType":"Rendering Failure","mail":{"messageId":"m"},"failure":{"errorMessage":""}}`,
		`{"eventType":"Complaint","mail":{"messageId":"m"},"complaint":{"complaintSubType":"OnAccountSuppressionList","complainedRecipients":[]}}`,
		`{"eventType":"Delivery","mail":{"messageId":"m"},"delivery":null}`,
		`{"Type":"Notification","Message":"{\"eventType\":\"Send\",\"mail\":{\"messageId\":\"m\"}}"}`,
		`{"Type":"Notification","Message":"not json zq9-private@example.org"}`,
		`{"Type":"Notification","Message":"{\"eventType\":7}"}`,
		`{"eventType":"Delivery","mail":{"messageId":"zq9-private@example.org","timestamp":1}}`,
		`[]`, `null`, `"zq9-private@example.org"`, `{"Type":"Other"}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fbs, err := ParseFeedback(body)
		if err != nil {
			if fbs != nil {
				t.Fatalf("feedback %v beside error %v", fbs, err)
			}
			// The body names recipients; the error is logged.
			if msg := err.Error(); strings.Contains(msg, "@") || strings.Contains(msg, "zq9") {
				t.Fatalf("error quotes the body: %v", err)
			}
		} else {
			if len(fbs) != 1 {
				t.Fatalf("%d feedbacks for one body", len(fbs))
			}
			checkFeedback(t, fbs[0])
		}

		// Raw message delivery or not, one SES event reads the same.
		var probe struct {
			EventType        string `json:"eventType"`
			NotificationType string `json:"notificationType"`
		}
		if json.Unmarshal(body, &probe) != nil || (probe.EventType == "" && probe.NotificationType == "") {
			return
		}
		wrapped, err2 := json.Marshal(map[string]string{"Type": "Notification", "Message": string(body)})
		if err2 != nil {
			t.Fatal(err2)
		}
		wfbs, werr := ParseFeedback(wrapped)
		if (err == nil) != (werr == nil) || !reflect.DeepEqual(fbs, wfbs) {
			t.Fatalf("raw: %+v, %v\nwrapped by SNS: %+v, %v", fbs, err, wfbs, werr)
		}
	})
}

// checkFeedback asserts what one Feedback promises.
func checkFeedback(t *testing.T, fb Feedback) {
	t.Helper()
	outcomes := 0
	if fb.Event != nil {
		outcomes++
	}
	if fb.Reject != nil {
		outcomes++
	}
	if fb.Ignored {
		outcomes++
	}
	if outcomes != 1 {
		t.Fatalf("feedback %+v is not exactly one of event, reject, ignored", fb)
	}
	if fb.EventType == "" {
		t.Fatalf("feedback %+v has no event type", fb)
	}
	var texts []string // what is recorded
	if fb.Reject != nil {
		texts = append(texts, *fb.Reject)
	}
	var id, feedbackID string
	var recipients []string
	switch e := fb.Event.(type) {
	case nil:
	case *email.Delivered:
		id, feedbackID, recipients = e.EmailID, e.FeedbackID, e.Recipients
		checkTime(t, e.OccurredAt.IsZero())
	case *email.Bounced:
		id, feedbackID, recipients = e.EmailID, e.FeedbackID, e.Recipients
		texts = append(texts, e.BounceType, e.BounceSubtype)
		checkTime(t, e.OccurredAt.IsZero())
	case *email.Complained:
		id, feedbackID, recipients = e.EmailID, e.FeedbackID, e.Recipients
		texts = append(texts, e.FeedbackType)
		checkTime(t, e.OccurredAt.IsZero())
	case *email.Opened:
		id, feedbackID = e.EmailID, e.FeedbackID
		texts = append(texts, e.UserAgent)
		checkTime(t, e.OccurredAt.IsZero())
	case *email.Clicked:
		id, feedbackID = e.EmailID, e.FeedbackID
		texts = append(texts, e.Link)
		checkTime(t, e.OccurredAt.IsZero())
	default:
		t.Fatalf("unexpected event %T", fb.Event)
	}
	if fb.Event != nil {
		if id != fb.EmailID {
			t.Fatalf("event's email id %q, feedback's %q", id, fb.EmailID)
		}
		if !strings.HasPrefix(feedbackID, "ses_") || len(feedbackID) != 36 {
			t.Fatalf("feedback id %q", feedbackID)
		}
		if !slices.IsSorted(recipients) {
			t.Fatalf("recipients %q not sorted", recipients)
		}
		for _, r := range recipients {
			if r != strings.TrimSpace(r) {
				t.Fatalf("recipient %q not trimmed", r)
			}
		}
		texts = append(texts, recipients...)
		// The event is recorded as it is handled; a projection keeps its
		// texts, in jsonb too, which refuses \u0000.
		data, err := codec.Encode(fb.Event, eventstore.Metadata{})
		if err != nil {
			t.Fatalf("feedback %+v cannot be recorded: %v", fb, err)
		}
		if bytes.Contains(data.Data, []byte(`\u0000`)) {
			t.Fatalf("event %s holds NUL, which PostgreSQL cannot store", data.Data)
		}
	}
	for _, s := range texts {
		if strings.IndexByte(s, 0) >= 0 {
			t.Fatalf("feedback text %q holds NUL, which PostgreSQL cannot store", s)
		}
	}
}

func checkTime(t *testing.T, zero bool) {
	t.Helper()
	if zero {
		t.Fatal("event without a time")
	}
}
