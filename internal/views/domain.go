// Package views renders aggregates' states in the API's shapes, for the
// write routes that answer with a resource and the read routes alike.
package views

import (
	"time"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/apitime"
)

// Domain is the API's Domain resource.
type Domain struct {
	ID                 string                 `json:"id"`
	Domain             string                 `json:"domain"`
	Status             string                 `json:"status"`
	VerificationStatus string                 `json:"verification_status"`
	DkimMode           string                 `json:"dkim_mode"`
	DkimSelector       string                 `json:"dkim_selector"`
	DkimStatus         string                 `json:"dkim_status"`
	MailFromStatus     string                 `json:"mail_from_status"`
	MailFromDomain     string                 `json:"mail_from_domain"`
	DkimTransition     *Transition            `json:"dkim_transition"`
	RotationDue        bool                   `json:"rotation_due"`
	DNSRecords         []sendingdomain.Record `json:"dns_records"`
	Region             string                 `json:"region"`
	CreatedAt          apitime.Time           `json:"created_at"`
}

// Transition is a DKIM key change under way.
type Transition struct {
	Kind            string       `json:"kind"`
	Selector        string       `json:"selector"`
	State           string       `json:"state"`
	StartedAt       apitime.Time `json:"started_at"`
	CutOverAt       apitime.Time `json:"cut_over_at"`
	OldKeyRetiresAt apitime.Time `json:"old_key_retires_at"`
}

func status(ok bool) string {
	if ok {
		return "success"
	}
	return "pending"
}

// DomainOf renders st as seen at now; keys older than rotateAfter are due
// for rotation.
func DomainOf(st sendingdomain.State, now time.Time, rotateAfter time.Duration) Domain {
	v := Domain{
		ID: st.ID, Domain: st.Name, Status: string(st.Status), VerificationStatus: "pending",
		DkimMode: string(st.Mode), DkimSelector: st.Selector(),
		DkimStatus: status(st.DkimOK), MailFromStatus: status(st.MailFromOK), MailFromDomain: st.MailFromDomain,
		RotationDue: st.RotationDue(now, rotateAfter), DNSRecords: st.Records(), Region: st.Region,
		CreatedAt: apitime.Of(st.CreatedAt),
	}
	if st.Status == sendingdomain.StatusVerified {
		v.VerificationStatus = "verified"
	}
	if t := st.Transition; t != nil {
		v.DkimTransition = &Transition{
			Kind: string(t.Kind), Selector: t.Key.Selector, State: t.State, StartedAt: apitime.Of(t.StartedAt),
			CutOverAt: apitime.Of(t.CutOverAt), OldKeyRetiresAt: apitime.Of(t.OldKeyRetiresAt),
		}
	}
	return v
}
