package smtp

import (
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/mailmsg"
)

// Feedback is the feedback of an SMTP relay: accepted means delivered.
func Feedback(st email.State, at time.Time) []domain.Event {
	id := st.Queued.EmailID
	return []domain.Event{&email.Delivered{EmailID: id, FeedbackID: "relay-delivery-" + id, Recipients: mailmsg.Addresses(st.Recipients()), OccurredAt: at.Add(time.Millisecond)}}
}
