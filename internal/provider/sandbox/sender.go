package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mailroom/mailroom/internal/provider"
)

// Outbox writes every message as <email_id>.eml into a directory instead
// of delivering it. A message is written at most once: a repeated send of
// the same email (after a crash, say) finds its file and changes nothing.
type Outbox struct {
	dir     string
	latency time.Duration
}

// NewOutbox returns an outbox writing into dir, created if missing. Each
// send first waits latency, as a provider's API round trip does, so the
// pipeline's throughput against a real provider can be measured without one.
func NewOutbox(dir string, latency time.Duration) (*Outbox, error) {
	if latency < 0 {
		return nil, fmt.Errorf("sandbox outbox: negative latency %s", latency)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox outbox: %w", err)
	}
	return &Outbox{dir: dir, latency: latency}, nil
}

var _ provider.Sender = (*Outbox)(nil)

// MessageID is the provider message id the sandbox gives an email.
func MessageID(emailID string) string { return "sandbox-" + emailID }

// Path is where the message of emailID is written.
func (o *Outbox) Path(emailID string) string { return filepath.Join(o.dir, emailID+".eml") }

// Send waits the outbox's latency, then writes the message to a temporary
// file and links it under its final name, which fails if the file exists:
// no partial file is ever visible and no message is written twice. A
// context ended during the wait returns its error and writes nothing. The
// file is not synced to disk: a process killed after Send still leaves it,
// and a development outbox need not survive the machine's crash, while a
// flush per message made the sandbox the dearest step of a send.
func (o *Outbox) Send(ctx context.Context, m provider.Outbound) (string, error) {
	if o.latency > 0 {
		t := time.NewTimer(o.latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
	if m.EmailID == "" || strings.ContainsAny(m.EmailID, `/\.`) {
		return "", &provider.RejectedError{Reason: "invalid email id"}
	}
	final := o.Path(m.EmailID)
	if _, err := os.Stat(final); err == nil {
		return MessageID(m.EmailID), nil
	}
	tmp, err := os.CreateTemp(o.dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(m.Raw); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Link(tmp.Name(), final); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return MessageID(m.EmailID), nil
}

// Outcome is what the simulator says happened to one recipient.
type Outcome struct {
	Delivered     bool
	Bounced       bool
	BounceType    string
	BounceSubtype string
	Complained    bool
}

// Simulate gives a recipient the feedback the SES mailbox simulator gives.
func Simulate(recipient string) Outcome {
	addr := strings.ToLower(strings.TrimSpace(recipient))
	if i := strings.LastIndex(addr, "<"); i >= 0 {
		addr = strings.TrimSuffix(addr[i+1:], ">")
	}
	// As with SES, a label after "+" tells test sends apart and changes
	// nothing: bounce+order-7@ bounces.
	if local, domain, ok := strings.Cut(addr, "@"); ok && domain == "simulator.amazonses.com" {
		local, _, _ = strings.Cut(local, "+")
		addr = local + "@" + domain
	}
	switch addr {
	case "bounce@simulator.amazonses.com":
		return Outcome{Bounced: true, BounceType: "Permanent", BounceSubtype: "General"}
	case "suppressionlist@simulator.amazonses.com":
		return Outcome{Bounced: true, BounceType: "Permanent", BounceSubtype: "OnAccountSuppressionList"}
	case "complaint@simulator.amazonses.com":
		return Outcome{Delivered: true, Complained: true}
	default: // success@, ooto@ and everyone else
		return Outcome{Delivered: true}
	}
}
