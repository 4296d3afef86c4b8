package ses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// sesDoc loads a developer-guide example from testdata, adds the
// mailroom_email_id tag SES would publish for a Mailroom send, applies edit
// and returns the SES event JSON.
func sesDoc(t *testing.T, name, emailID string, edit func(map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if emailID != "" {
		tags := doc["mail"].(map[string]any)["tags"].(map[string]any)
		tags[EmailIDTag] = []string{emailID}
	}
	if edit != nil {
		edit(doc)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// snsWrap wraps an SES event the way SNS delivers it to SQS without raw
// message delivery.
func snsWrap(t *testing.T, event []byte) []byte {
	t.Helper()
	out, err := json.Marshal(map[string]string{
		"Type":      "Notification",
		"MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
		"TopicArn":  "arn:aws:sns:us-east-1:123456789012:mailroom-events",
		"Message":   string(event),
		"Timestamp": "2017-08-05T00:41:03.000Z",
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseFeedbackDeveloperGuideExamples(t *testing.T) {
	const id = "em_0123"
	rcpt := []string{"recipient@example.com"}
	softBounce := func(d map[string]any) {
		d["bounce"].(map[string]any)["bounceType"] = "Transient"
		d["bounce"].(map[string]any)["bounceSubType"] = "MailboxFull"
	}
	cases := []struct {
		name, file string
		edit       func(map[string]any)
		check      func(t *testing.T, f Feedback)
	}{
		{"delivery", "delivery.json", nil, func(t *testing.T, f Feedback) {
			ev, ok := f.Event.(*email.Delivered)
			if !ok || ev.EmailID != id || !slices.Equal(ev.Recipients, rcpt) || !ev.OccurredAt.Equal(ts("2016-10-19T23:21:04.133Z")) || ev.FeedbackID == "" {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"hard bounce", "bounce.json", nil, func(t *testing.T, f Feedback) {
			ev, ok := f.Event.(*email.Bounced)
			if !ok || ev.BounceType != "Permanent" || ev.BounceSubtype != "General" || !slices.Equal(ev.Recipients, rcpt) ||
				!ev.OccurredAt.Equal(ts("2017-08-05T00:41:02.669Z")) || !email.Permanent(ev.BounceType) {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"soft bounce", "bounce.json", softBounce, func(t *testing.T, f Feedback) {
			ev, ok := f.Event.(*email.Bounced)
			if !ok || ev.BounceType != "Transient" || ev.BounceSubtype != "MailboxFull" || email.Permanent(ev.BounceType) {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"complaint", "complaint.json", nil, func(t *testing.T, f Feedback) {
			ev, ok := f.Event.(*email.Complained)
			if !ok || ev.FeedbackType != "abuse" || !slices.Equal(ev.Recipients, rcpt) || ev.EmailID != id {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"complaint of a suppressed address", "complaint-suppression-list.json", nil, func(t *testing.T, f Feedback) {
			// Nothing was sent to the address, so no one complained: it
			// bounces as SES's bounce of a suppressed address does.
			ev, ok := f.Event.(*email.Bounced)
			if !ok || ev.BounceType != "Permanent" || ev.BounceSubtype != "OnAccountSuppressionList" || !slices.Equal(ev.Recipients, rcpt) ||
				ev.EmailID != id || !ev.OccurredAt.Equal(ts("2017-08-05T00:41:02.669Z")) || !email.Permanent(ev.BounceType) {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"complaint of suppressed addresses", "complaint-suppression-list.json", func(d map[string]any) {
			d["complaint"].(map[string]any)["complainedRecipients"] = []any{
				map[string]any{"emailAddress": "zoe@example.org"}, map[string]any{"emailAddress": "ann@example.net"},
			}
		}, func(t *testing.T, f Feedback) {
			ev, ok := f.Event.(*email.Bounced)
			if !ok || !slices.Equal(ev.Recipients, []string{"ann@example.net", "zoe@example.org"}) {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"open", "open.json", nil, func(t *testing.T, f Feedback) {
			ev, ok := f.Event.(*email.Opened)
			if !ok || ev.OccurredAt != ts("2017-08-09T22:00:19.652Z") || ev.UserAgent == "" {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"click", "click.json", nil, func(t *testing.T, f Feedback) {
			ev, ok := f.Event.(*email.Clicked)
			if !ok || ev.Link != "http://docs.aws.amazon.com/ses/latest/DeveloperGuide/send-email-smtp.html" || ev.OccurredAt != ts("2017-08-09T23:51:25.570Z") {
				t.Errorf("event = %#v", f.Event)
			}
		}},
		{"reject", "reject.json", nil, func(t *testing.T, f Feedback) {
			if f.Event != nil || f.Reject == nil || *f.Reject != "Bad content" || f.Ignored {
				t.Errorf("feedback = %#v", f)
			}
		}},
		{"rendering failure", "rendering-failure.json", nil, func(t *testing.T, f Feedback) {
			if f.Event != nil || f.Reject == nil || *f.Reject != "Attribute 'attributeName' is not present in the rendering data." {
				t.Errorf("feedback = %#v", f)
			}
		}},
		{"send", "send.json", nil, func(t *testing.T, f Feedback) {
			if !f.Ignored || f.Event != nil || f.Reject != nil {
				t.Errorf("feedback = %#v", f)
			}
		}},
		{"delivery delay", "delivery-delay.json", nil, func(t *testing.T, f Feedback) {
			if !f.Ignored || f.Event != nil {
				t.Errorf("feedback = %#v", f)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := sesDoc(t, c.file, id, c.edit)
			for _, body := range [][]byte{snsWrap(t, doc), doc} { // SNS envelope and raw delivery
				fbs, err := ParseFeedback(body)
				if err != nil {
					t.Fatal(err)
				}
				if len(fbs) != 1 {
					t.Fatalf("got %d feedbacks", len(fbs))
				}
				f := fbs[0]
				if f.EmailID != id || f.MessageID != "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000" {
					t.Errorf("ids = %q, %q", f.EmailID, f.MessageID)
				}
				c.check(t, f)
				// The same SQS message again maps onto the same feedback id.
				again, err := ParseFeedback(body)
				if err != nil {
					t.Fatal(err)
				}
				if feedbackIDOf(again[0]) != feedbackIDOf(f) {
					t.Errorf("redelivery changed the feedback id: %q vs %q", feedbackIDOf(again[0]), feedbackIDOf(f))
				}
			}
		})
	}
}

func feedbackIDOf(f Feedback) string {
	switch ev := f.Event.(type) {
	case *email.Delivered:
		return ev.FeedbackID
	case *email.Bounced:
		return ev.FeedbackID
	case *email.Complained:
		return ev.FeedbackID
	case *email.Opened:
		return ev.FeedbackID
	case *email.Clicked:
		return ev.FeedbackID
	}
	return ""
}

func TestFeedbackIDsDifferAcrossEvents(t *testing.T) {
	seen := map[string]string{}
	for _, file := range []string{"delivery.json", "bounce.json", "complaint.json", "open.json", "click.json"} {
		fbs, err := ParseFeedback(sesDoc(t, file, "em_1", nil))
		if err != nil {
			t.Fatal(err)
		}
		id := feedbackIDOf(fbs[0])
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s share feedback id %s", file, other, id)
		}
		seen[id] = file
	}
	// A suppressed address's complaint maps to a bounce, yet keeps an id
	// of its own: bounce.json has the same message, time and recipient.
	// It is the id the complaint had before it was read as a bounce, so
	// SQS delivering such a document again records nothing new.
	sup, err := ParseFeedback(sesDoc(t, "complaint-suppression-list.json", "em_1", nil))
	if err != nil {
		t.Fatal(err)
	}
	bounce, _ := ParseFeedback(sesDoc(t, "bounce.json", "em_1", nil))
	complaint, _ := ParseFeedback(sesDoc(t, "complaint.json", "em_1", nil))
	if got := feedbackIDOf(sup[0]); got == "" || got == feedbackIDOf(bounce[0]) || got != feedbackIDOf(complaint[0]) {
		t.Errorf("suppressed complaint's id %q; bounce's %q, complaint's %q", got, feedbackIDOf(bounce[0]), feedbackIDOf(complaint[0]))
	}
	// A second open of the same message (another timestamp) is a new event.
	a, _ := ParseFeedback(sesDoc(t, "open.json", "em_1", nil))
	b, _ := ParseFeedback(sesDoc(t, "open.json", "em_1", func(d map[string]any) {
		d["open"].(map[string]any)["timestamp"] = "2017-08-10T08:00:00.000Z"
	}))
	if feedbackIDOf(a[0]) == feedbackIDOf(b[0]) {
		t.Error("two opens share a feedback id")
	}
}

func TestParseFeedbackWithoutTagKeepsMessageID(t *testing.T) {
	fbs, err := ParseFeedback(sesDoc(t, "delivery.json", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	if fbs[0].EmailID != "" || fbs[0].MessageID == "" || fbs[0].Event == nil {
		t.Errorf("feedback = %#v", fbs[0])
	}
}

func TestParseFeedbackRejectsGarbage(t *testing.T) {
	for _, body := range []string{"not json", `{"foo":1}`, `{"Type":"Notification","Message":"nope"}`, `{"eventType":"Delivery","mail":{}}`} {
		if _, err := ParseFeedback([]byte(body)); err == nil {
			t.Errorf("ParseFeedback(%q) succeeded", body)
		}
	}
	fbs, err := ParseFeedback([]byte(`{"Type":"SubscriptionConfirmation","Message":"You have chosen to subscribe"}`))
	if err != nil || !fbs[0].Ignored {
		t.Errorf("subscription confirmation: %#v, %v", fbs, err)
	}
}

// An event whose own and mail timestamps are missing or unparsable takes
// the time SNS published it, the same on every redelivery; a raw event
// with no time at all is refused, not dated at the year 1.
func TestFeedbackWithoutATimestamp(t *testing.T) {
	untimed := func(d map[string]any) {
		d["delivery"].(map[string]any)["timestamp"] = ""
		d["mail"].(map[string]any)["timestamp"] = "yesterday"
	}
	if fbs, err := ParseFeedback(sesDoc(t, "delivery.json", "em_1", untimed)); err == nil {
		t.Errorf("a raw delivery without a time was parsed: %#v", fbs[0].Event)
	}
	fbs, err := ParseFeedback(snsWrap(t, sesDoc(t, "delivery.json", "em_1", untimed)))
	if err != nil {
		t.Fatal(err)
	}
	d, ok := fbs[0].Event.(*email.Delivered)
	if !ok || !d.OccurredAt.Equal(time.Date(2017, 8, 5, 0, 41, 3, 0, time.UTC)) {
		t.Errorf("delivery = %#v, want it at the SNS time 2017-08-05T00:41:03Z", fbs[0].Event)
	}
}

// A timestamp whose UTC time falls outside the years 0 to 9999 cannot be
// recorded (an event's JSON cannot carry it): it is no time for the event,
// so the document is refused or dated by the next time it has, rather
// than failing to record on every redelivery.
func TestFeedbackTimestampThatCannotBeRecorded(t *testing.T) {
	unrecordable := func(d map[string]any) {
		d["delivery"].(map[string]any)["timestamp"] = "0000-01-01T00:00:00+01:00"
		d["mail"].(map[string]any)["timestamp"] = "9999-12-31T23:30:00-01:00"
	}
	if fbs, err := ParseFeedback(sesDoc(t, "delivery.json", "em_1", unrecordable)); err == nil {
		t.Errorf("a raw delivery without a recordable time was parsed: %#v", fbs[0].Event)
	}
	fbs, err := ParseFeedback(snsWrap(t, sesDoc(t, "delivery.json", "em_1", unrecordable)))
	if err != nil {
		t.Fatal(err)
	}
	d, ok := fbs[0].Event.(*email.Delivered)
	if !ok || !d.OccurredAt.Equal(time.Date(2017, 8, 5, 0, 41, 3, 0, time.UTC)) {
		t.Errorf("delivery = %#v, want it at the SNS time 2017-08-05T00:41:03Z", fbs[0].Event)
	}
	if _, err := codec.Encode(d, eventstore.Metadata{}); err != nil {
		t.Errorf("the delivery cannot be recorded: %v", err)
	}
}

func TestPollFeedbackDeletesOnlyAfterHandleSucceeds(t *testing.T) {
	f := newFakeAWS(t)
	const queue = "https://sqs.us-east-1.amazonaws.com/123456789012/mailroom-events"
	p := f.provider(queue)
	good := f.enqueue(string(snsWrap(t, sesDoc(t, "delivery.json", "em_42", nil))))
	bad := f.enqueue("this is not an SES event")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu    sync.Mutex
		calls int
		got   []Feedback
	)
	done := make(chan error, 1)
	go func() {
		done <- p.PollFeedback(ctx, func(_ context.Context, fbs []Feedback) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return errors.New("event store unavailable")
			}
			got = append(got, fbs...)
			cancel()
			return nil
		}, nil)
	}()

	// First round: handle fails, so the good message must not be deleted;
	// the unparseable one is deleted.
	waitFor(t, func() bool { return slices.Contains(f.log(), "delete "+bad) })
	mu.Lock()
	first := calls
	mu.Unlock()
	if first != 1 {
		t.Fatalf("handle calls = %d", first)
	}
	if slices.Contains(f.log(), "delete "+good) {
		t.Fatal("message deleted although handle failed")
	}
	// Visibility timeout runs out; the redelivery is handled and deleted.
	f.expireVisibility()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return slices.Contains(f.log(), "delete "+good) })
	log := f.log()
	want := []string{"receive " + good, "receive " + bad, "delete " + bad, "receive " + good, "delete " + good}
	if !slices.Equal(log, want) {
		t.Errorf("queue log = %v, want %v", log, want)
	}
	if len(got) != 1 || got[0].EmailID != "em_42" {
		t.Errorf("handled = %#v", got)
	}
	for _, r := range f.recorded() {
		if r.Target == "AmazonSQS.ReceiveMessage" {
			if r.Body["QueueUrl"] != queue || r.Body["WaitTimeSeconds"] != float64(20) || r.Body["MaxNumberOfMessages"] != float64(10) {
				t.Errorf("receive request = %v", r.Body)
			}
		}
	}
}

// lockedBuffer is a log destination the poller writes to while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A body that cannot be parsed is logged by its length and why, never by
// its content: feedback names recipients, and json's errors and an unknown
// event type would carry parts of it into the log.
func TestUnparseableFeedbackIsLoggedWithoutItsContent(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("https://sqs.us-east-1.amazonaws.com/123456789012/mailroom-events")
	var logs lockedBuffer
	p.logger = slog.New(slog.NewTextHandler(&logs, nil))
	bodies := []string{
		"this is not json: <ann@example.org>",                       // a syntax error
		`{"eventType":"ann@example.org","mail":{}}`,                 // an unknown type without a message id
		`{"eventType":"Bounce","mail":{"messageId":1234567890123}}`, // a number where a string goes
		`{"Type":"Notification","Message":"ann@example.org"}`,       // an envelope holding no event
	}
	var ids []string
	for _, b := range bodies {
		ids = append(ids, f.enqueue(b))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.PollFeedback(ctx, func(context.Context, []Feedback) error {
			t.Error("handle called for a body that cannot be parsed")
			return nil
		}, nil)
	}()
	waitFor(t, func() bool {
		for _, id := range ids {
			if !slices.Contains(f.log(), "delete "+id) {
				return false
			}
		}
		return true
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, leak := range []string{"ann@", "example.org", "1234567890123", "this is not json"} {
		if strings.Contains(out, leak) {
			t.Errorf("the log holds %q of a body:\n%s", leak, out)
		}
	}
	for i, b := range bodies {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "sqs_message_id="+ids[i]) {
				line = l
			}
		}
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, fmt.Sprintf("body_bytes=%d", len(b))) || !strings.Contains(line, "err=") {
			t.Errorf("body %d logged as %q", i, line)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// What SES sends while it is set up, on the queue of events: the notice
// that validates the SNS topic when the configuration set's event
// destination is created (plain text, not an event), and an identity
// topic's AmazonSnsSubscriptionSucceeded. Each is taken as feedback that
// changes nothing and deleted, not logged at error as unparseable: every
// installation that follows docs/ses.md receives them.
func TestSESSetupNoticesAreIgnoredNotRefused(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("https://sqs.us-east-1.amazonaws.com/123456789012/mailroom-events")
	var logs lockedBuffer
	p.logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const validated = "Successfully validated SNS topic for Amazon SES event publishing."
	subscribed, err := json.Marshal(map[string]string{"notificationType": "AmazonSnsSubscriptionSucceeded",
		"message": "You have successfully subscribed your Amazon SNS topic 'arn:aws:sns:us-east-1:123456789012:mailroom-events' to receive 'Bounce' notifications from Amazon SES for identity 'example.com'."})
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{
		"topic validation":            string(snsWrap(t, []byte(validated))),
		"topic validation, raw":       validated,
		"subscription succeeded":      string(snsWrap(t, subscribed)),
		"subscription succeeded, raw": string(subscribed),
	}
	ids := map[string]string{}
	for name, b := range bodies {
		ids[f.enqueue(b)] = name
	}
	var mu sync.Mutex
	var handled []Feedback
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.PollFeedback(ctx, func(_ context.Context, fbs []Feedback) error {
			mu.Lock()
			defer mu.Unlock()
			handled = append(handled, fbs...)
			return nil
		}, nil)
	}()
	waitFor(t, func() bool {
		for id := range ids {
			if !slices.Contains(f.log(), "delete "+id) {
				return false
			}
		}
		return true
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Contains(out, "level=ERROR") {
		t.Errorf("a setup notice was logged at error:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != len(bodies) {
		t.Fatalf("handled %d feedbacks for %d notices: %+v", len(handled), len(bodies), handled)
	}
	for _, fb := range handled {
		if !fb.Ignored || fb.Event != nil || fb.Reject != nil {
			t.Errorf("a setup notice was taken as %+v, want it ignored", fb)
		}
	}
}

// A subscription waiting for confirmation is told to the operator: until
// it is confirmed, no feedback reaches the queue.
func TestPollFeedbackWarnsOfAnUnconfirmedSubscription(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("https://sqs.us-east-1.amazonaws.com/123456789012/mailroom-events")
	var logs lockedBuffer
	p.logger = slog.New(slog.NewTextHandler(&logs, nil))
	id := f.enqueue(`{"Type":"SubscriptionConfirmation","Message":"You have chosen to subscribe","SubscribeURL":"https://sns.example/confirm"}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.PollFeedback(ctx, func(context.Context, []Feedback) error { return nil }, nil)
	}()
	waitFor(t, func() bool { return slices.Contains(f.log(), "delete "+id) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "confirm the events queue's subscription") ||
		!strings.Contains(out, "subscribe_url=https://sns.example/confirm") {
		t.Fatalf("no warning of the unconfirmed subscription:\n%s", out)
	}
}

// While the queue cannot be read no bounce or complaint is recorded: the
// poller says so to health at each failure, and once at the success after
// them, so that readiness can show it.
func TestPollFeedbackReportsAQueueItCannotRead(t *testing.T) {
	f := newFakeAWS(t)
	p := f.provider("https://sqs.us-east-1.amazonaws.com/123456789012/mailroom-events")
	for range 2 {
		f.failNext("AmazonSQS.ReceiveMessage", fakeError{Status: 400, Code: "AccessDenied", Msg: "not authorized to sqs:ReceiveMessage"})
	}
	id := f.enqueue(`{"Type":"Notification","Message":"{\"eventType\":\"Send\",\"mail\":{\"messageId\":\"m-1\",\"tags\":{}}}"}`)
	var mu sync.Mutex
	var heard []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.PollFeedback(ctx, func(context.Context, []Feedback) error { return nil }, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				heard = append(heard, "ok")
			} else {
				heard = append(heard, "failed")
			}
		})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(f.log(), "delete "+id) {
		if time.Now().After(deadline) {
			t.Fatal("the message was never read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(heard, []string{"failed", "failed", "ok"}) {
		t.Fatalf("health heard %v, want two failures then one success", heard)
	}
}
