// Package connstr keeps the passwords of connection strings (the database,
// the event store, the SMTP relay) out of the errors about them.
package connstr

import (
	"errors"
	"strings"
)

// ErrMisplacedCredentials is the error for a URL whose user or password
// holds a character that ends the host part early.
var ErrMisplacedCredentials = errors.New(`the user or password holds a character that must be percent-encoded ("/" as %2F, "?" as %3F, "#" as %23)`)

// MisplacedCredentials reports whether the URL raw has a literal "@" after
// the end of its host part (the first of stops after "://") and none
// before it. A password holding a "/", "?" or "#" that is not
// percent-encoded (SES SMTP passwords hold "/" and "+") ends the host part
// there: the password's rest is then read as port, path, query or
// fragment, and the parsers' errors quote it ("invalid port", "unknown
// parameter", "unsupported URL path").
func MisplacedCredentials(raw, stops string) bool {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	end := strings.IndexAny(rest, stops)
	if end < 0 || strings.Contains(rest[:end], "@") {
		return false
	}
	return strings.Contains(rest[end:], "@")
}
