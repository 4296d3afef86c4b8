package views

import (
	"time"

	"github.com/mailroom/mailroom/internal/apitime"
)

// Erasure is the record of an erasure request: what it erased, never the
// address it was for.
type Erasure struct {
	ID        string       `json:"id"`
	Object    string       `json:"object"`
	Erased    int          `json:"erased"`    // emails erased
	EmailIDs  []string     `json:"email_ids"` // which
	CreatedAt apitime.Time `json:"created_at"`
}

// ErasureOf renders an erasure request that erased emailIDs.
func ErasureOf(id string, emailIDs []string, at time.Time) Erasure {
	if emailIDs == nil {
		emailIDs = []string{}
	}
	return Erasure{ID: id, Object: "erasure", Erased: len(emailIDs), EmailIDs: emailIDs, CreatedAt: apitime.Of(at)}
}
