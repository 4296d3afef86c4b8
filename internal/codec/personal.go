package codec

import (
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
)

// Personal says where an event type keeps personal data: the JSON fields
// that are stored encrypted, and the field whose value names the data key
// that seals them. Destroying that key erases the fields in every event
// that names it; the event then reads with "erased": true and the fields
// at their zero values.
type Personal struct {
	Fields []string
	// KeyField holds the id of the email whose key seals the fields; an
	// event with it empty has nothing personal and is stored as it is.
	KeyField string
	// AccountField, when set, names the account that owns a key the event
	// creates.
	AccountField string
}

// KeyID is the id of the data key of the email emailID.
func KeyID(emailID string) string { return email.Stream(emailID) }

var personal = map[string]Personal{
	(&email.Queued{}).EventType(): {
		Fields:   []string{"from", "from_email", "to", "cc", "bcc", "reply_to", "subject", "tags", "attachments", "request_hash"},
		KeyField: "email_id", AccountField: "account_id",
	},
	(&email.Scanned{}).EventType():    {Fields: []string{"attachments"}, KeyField: "email_id"},
	(&email.Failed{}).EventType():     {Fields: []string{"detail"}, KeyField: "email_id"},
	(&email.Delivered{}).EventType():  {Fields: []string{"recipients"}, KeyField: "email_id"},
	(&email.Bounced{}).EventType():    {Fields: []string{"recipients"}, KeyField: "email_id"},
	(&email.Complained{}).EventType(): {Fields: []string{"recipients"}, KeyField: "email_id"},
	(&email.Opened{}).EventType():     {Fields: []string{"user_agent"}, KeyField: "email_id"},
	(&email.Clicked{}).EventType():    {Fields: []string{"link"}, KeyField: "email_id"},
	(&delivery.Created{}).EventType(): {Fields: []string{"payload"}, KeyField: "email_id", AccountField: "account_id"},
}

// PersonalOf returns where events of eventType keep personal data, if they
// keep any.
func PersonalOf(eventType string) (Personal, bool) {
	p, ok := personal[eventType]
	return p, ok
}
