package sandbox

import (
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/mailmsg"
)

// Feedback plays the SES mailbox simulator: the delivery, bounce or
// complaint each recipient calls for, recorded with EmailSent. Feedback ids
// are derived from the email, so nothing is recorded twice.
func Feedback(st email.State, at time.Time) []domain.Event {
	id := st.Queued.EmailID
	var delivered, complained []string
	bounces := map[[2]string][]string{}
	var kinds [][2]string
	for _, r := range mailmsg.Addresses(st.Recipients()) {
		o := Simulate(r)
		if o.Delivered {
			delivered = append(delivered, r)
		}
		if o.Complained {
			complained = append(complained, r)
		}
		if o.Bounced {
			k := [2]string{o.BounceType, o.BounceSubtype}
			if _, seen := bounces[k]; !seen {
				kinds = append(kinds, k)
			}
			bounces[k] = append(bounces[k], r)
		}
	}
	var fb []domain.Event
	if len(delivered) > 0 {
		fb = append(fb, &email.Delivered{EmailID: id, FeedbackID: "sandbox-delivery-" + id, Recipients: delivered, OccurredAt: at.Add(time.Millisecond)})
	}
	for _, k := range kinds {
		fb = append(fb, &email.Bounced{EmailID: id, FeedbackID: "sandbox-bounce-" + k[1] + "-" + id, BounceType: k[0], BounceSubtype: k[1], Recipients: bounces[k], OccurredAt: at.Add(time.Millisecond)})
	}
	if len(complained) > 0 {
		fb = append(fb, &email.Complained{EmailID: id, FeedbackID: "sandbox-complaint-" + id, FeedbackType: "abuse", Recipients: complained, OccurredAt: at.Add(2 * time.Millisecond)})
	}
	return fb
}
