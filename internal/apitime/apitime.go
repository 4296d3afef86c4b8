// Package apitime renders timestamps the one way the API shows them:
// UTC with milliseconds, "YYYY-MM-DDTHH:MM:SS.mmmZ".
package apitime

import (
	"fmt"
	"time"
)

// Layout is the API's timestamp format.
const Layout = "2006-01-02T15:04:05.000Z"

// Time is a time.Time that marshals to Layout. The zero Time marshals as null,
// so optional timestamps need no pointer.
type Time struct{ time.Time }

// Of wraps t.
func Of(t time.Time) Time { return Time{t} }

// Format renders t in Layout.
func Format(t time.Time) string { return t.UTC().Format(Layout) }

func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return []byte(`"` + Format(t.Time) + `"`), nil
}

func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	if len(b) < 2 || b[0] != '"' {
		return fmt.Errorf("timestamp: want a string")
	}
	v, err := time.Parse(time.RFC3339Nano, string(b[1:len(b)-1]))
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}
