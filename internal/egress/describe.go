package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
)

// maxDescription bounds the fallback text Describe passes through.
const maxDescription = 120

// Describe turns an error from the egress client, CheckURL or Fetch into a
// short human string for delivery records and failure reasons: "timeout
// after 10s", "connection refused", "destination not allowed", "redirect 302
// not followed", "larger than N bytes", "host does not resolve to a public
// address" (no such host, or one resolved to a non-public address: one
// answer, as in CheckURL), "tls: ...". It never includes the request URL
// nor an address a host resolved to: it is shown to customers. nil gives "".
func Describe(err error) string {
	if err == nil {
		return ""
	}
	var (
		re  *RefusedError
		te  *TimeoutError
		se  *StatusError
		tle *TooLargeError
		de  *net.DNSError
	)
	switch {
	case errors.As(err, &te):
		return te.Error()
	case errors.As(err, &re) && re.Reason == unusableHost:
		return unusableHost
	case errors.Is(err, ErrRefused):
		return ErrRefused.Error()
	case errors.As(err, &se):
		return se.Error()
	case errors.As(err, &tle):
		return tle.Error()
	case errors.As(err, &de):
		switch {
		case de.IsNotFound:
			return unusableHost
		case de.IsTimeout:
			return "dns: timeout"
		default:
			return "dns: lookup failed" // de.Err may quote the resolver's address
		}
	}
	if s := describeTLS(err); s != "" {
		return s
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return "connection closed unexpectedly"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return "connection failed" // its text quotes the address dialled
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	// net/http's answers to a response it cannot read are plain strings.
	msg := strings.TrimPrefix(err.Error(), "net/http: HTTP/1.x transport connection broken: ")
	switch {
	case strings.Contains(msg, "server response headers exceeded"):
		return "response headers too large"
	case strings.Contains(msg, "malformed HTTP"), strings.Contains(msg, "malformed MIME header"):
		return "not a valid HTTP response"
	}
	return shorten(msg)
}

// DescribeStatus describes a webhook receiver's response status for the
// delivery record: "" for 2xx, "redirect 302 not followed" for a redirect,
// "receiver returned 500" otherwise (304 Not Modified, say, which is no
// redirect).
func DescribeStatus(code int) string {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusMultipleChoices:
		return fmt.Sprintf("redirect %d not followed", code)
	}
	switch {
	case code >= 200 && code <= 299:
		return ""
	default:
		return fmt.Sprintf("receiver returned %d", code)
	}
}

// describeTLS names certificate and handshake failures briefly; "" when err
// is not one.
func describeTLS(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown):
		return "tls: certificate signed by unknown authority"
	case errors.As(err, &hostname):
		return "tls: certificate is not valid for host"
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "tls: certificate expired or not yet valid"
		}
		return "tls: invalid certificate"
	case errors.As(err, &header):
		return "tls: server did not answer with TLS"
	}
	msg := err.Error()
	if strings.Contains(msg, "TLS handshake timeout") {
		return "tls: handshake timeout"
	}
	if i := strings.Index(msg, "tls: "); i >= 0 {
		return shorten(msg[i:])
	}
	return ""
}

func shorten(s string) string {
	if r := []rune(s); len(r) > maxDescription {
		return string(r[:maxDescription-1]) + "…"
	}
	return s
}
