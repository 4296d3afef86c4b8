// Package scan is Mailroom's content gateway: it decides, before an email
// reaches a provider, whether its content may be sent.
//
// It blocks the attachment file types Amazon SES refuses (so an email fails
// with a clear reason here rather than as a provider rejection later), the
// EICAR anti-virus test signature (built in, so the malware path can be
// exercised without a virus scanner), and, when a ClamAV daemon is
// configured, whatever clamd reports as infected.
package scan

import (
	"bytes"
	"context"
	"time"
)

// Verdict is the outcome of a scan. A blocked verdict is not an error: the
// email fails with Reason.
type Verdict struct {
	Blocked bool
	Reason  string // e.g. "attachment type .exe is not allowed", "malware detected: Eicar-Signature"
}

// Scanner checks email bodies and attachments. It is safe for concurrent
// use; each clamd scan uses its own connection.
type Scanner struct {
	clamd   *clamdClient // nil: built-in checks only
	timeout time.Duration
}

// DefaultTimeout bounds one clamd scan (dial, upload and verdict) when New is
// given a timeout <= 0.
const DefaultTimeout = 30 * time.Second

// New returns a Scanner. clamdAddr "" means built-in checks only; otherwise
// it is a clamd address, "host:port" (TCP) or "unix:/path/to/clamd.sock",
// and every scan is also sent to clamd with the INSTREAM command. timeout
// bounds each clamd scan.
func New(clamdAddr string, timeout time.Duration) *Scanner {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := &Scanner{timeout: timeout}
	if clamdAddr != "" {
		s.clamd = newClamdClient(clamdAddr, timeout)
	}
	return s
}

// ScanAttachment checks an attachment's file name and bytes. The error is
// reserved for scanner failures (clamd unreachable, timed out, or reporting
// an error); a blocked attachment is a Verdict.
func (s *Scanner) ScanAttachment(ctx context.Context, filename string, content []byte) (Verdict, error) {
	if ext, blocked := blockedExtension(filename); blocked {
		return Verdict{Blocked: true, Reason: "attachment type " + ext + " is not allowed"}, nil
	}
	return s.scanContent(ctx, content)
}

// ScanBody checks an HTML or text body for malware signatures.
func (s *Scanner) ScanBody(ctx context.Context, content []byte) (Verdict, error) {
	return s.scanContent(ctx, content)
}

// Ping checks that clamd answers; it returns nil when no clamd is configured.
// Meant for readiness checks.
func (s *Scanner) Ping(ctx context.Context) error {
	if s.clamd == nil {
		return nil
	}
	return s.clamd.ping(ctx)
}

func (s *Scanner) scanContent(ctx context.Context, content []byte) (Verdict, error) {
	if ContainsEICAR(content) {
		return malware(EICARName), nil
	}
	if s.clamd == nil {
		return Verdict{}, nil
	}
	name, err := s.clamd.scan(ctx, content)
	if err != nil {
		return Verdict{}, err
	}
	if name != "" {
		return malware(name), nil
	}
	return Verdict{}, nil
}

func malware(name string) Verdict {
	return Verdict{Blocked: true, Reason: "malware detected: " + name}
}

// EICARName is the signature name reported for the EICAR test file, as
// ClamAV names it.
const EICARName = "Eicar-Signature"

// eicar is the 68-byte EICAR anti-virus test string. It is assembled from two
// halves so that this source file and the compiled binary do not themselves
// look like the test file to a scanner on a developer's machine.
var eicar = []byte(`X5O!P%@AP[4\PZX54(P^)7CC)7}$` + `EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*`)

// ContainsEICAR reports whether content contains the EICAR test string
// anywhere. (Anti-virus engines only flag it at the start of a file; matching
// anywhere also catches it inside an HTML or text body.)
func ContainsEICAR(content []byte) bool {
	return bytes.Contains(content, eicar)
}
