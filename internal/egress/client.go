package egress

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// Transport limits. Webhook receivers are many different hosts, each seeing
// modest concurrency from us.
const (
	maxIdleConns        = 256
	maxIdleConnsPerHost = 16
	idleConnTimeout     = 90 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	dialTimeout         = 10 * time.Second
	maxHeaderBytes      = 1 << 20
)

// Client returns the egress HTTP client: every connection goes through a
// dialer that refuses non-public addresses (ErrRefused), redirects are never
// followed (the caller sees the 3xx response), environment proxies are never
// used, plain http is refused unless AllowHTTP, and each request — headers
// and body — must finish within timeout (0 means no limit beyond the
// request's context), failing with a *TimeoutError that Describe renders as
// "timeout after 10s".
func (p Policy) Client(timeout time.Duration) *http.Client {
	return p.ClientWithTLS(timeout, nil)
}

// ClientWithTLS is Client with a TLS configuration, for tests that trust an
// httptest.NewTLSServer certificate (cfg is cloned; nil means the default).
func (p Policy) ClientWithTLS(timeout time.Duration, cfg *tls.Config) *http.Client {
	dialer := &net.Dialer{
		Timeout:   dialTimeout,
		KeepAlive: 30 * time.Second,
		Resolver:  p.Resolver,
		Control:   p.control,
	}
	base := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	if cfg != nil {
		base.TLSClientConfig = cfg.Clone()
	}
	return &http.Client{
		// The overall timeout lives in the transport (see transport), not
		// in Client.Timeout, so that the error can say how long it was.
		Transport: &transport{base: base, policy: p, timeout: timeout},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// control is the net.Dialer hook: it sees the resolved address about to be
// connected and refuses it unless it is public (or allowed).
func (p Policy) control(network, address string, _ syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return refused("network %s is not allowed", network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refused("invalid address")
	}
	if err := p.judge(ap.Addr()); err != nil {
		return p.refusedResolved(unusableHost, ap.Addr().String(), "destination is "+err.Error())
	}
	return nil
}

// TimeoutError is returned (wrapped in *url.Error) when a request does not
// finish within the client's timeout. It satisfies net.Error with Timeout()
// true and wraps context.DeadlineExceeded.
type TimeoutError struct {
	After time.Duration
}

func (e *TimeoutError) Error() string   { return "timeout after " + e.After.String() }
func (e *TimeoutError) Timeout() bool   { return true }
func (e *TimeoutError) Temporary() bool { return true }
func (e *TimeoutError) Unwrap() error   { return context.DeadlineExceeded }

// transport enforces the URL rules that need no DNS on every request (so a
// URL that skipped CheckURL cannot reach, say, http:// or localhost) and
// the overall timeout. A RoundTripper other than *http.Transport makes
// http.Client fall back to legacy cancellation when Client.Timeout is set,
// which is one more reason the timeout is applied here.
type transport struct {
	base    *http.Transport
	policy  Policy
	timeout time.Duration
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if _, _, err := t.policy.checkStatic(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if t.timeout <= 0 {
		return t.base.RoundTrip(req)
	}
	cause := &TimeoutError{After: t.timeout}
	ctx, cancel := context.WithTimeoutCause(req.Context(), t.timeout, cause)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timedOut := context.Cause(ctx) == error(cause)
		cancel()
		if timedOut {
			return nil, cause
		}
		return nil, err
	}
	resp.Body = &timeoutBody{rc: resp.Body, ctx: ctx, cancel: cancel, cause: cause}
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// underlying transport.
func (t *transport) CloseIdleConnections() { t.base.CloseIdleConnections() }

// timeoutBody keeps the request's deadline running while the body is read
// and releases it on Close; a read cut short by the deadline reports the
// *TimeoutError.
type timeoutBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelFunc
	cause  *TimeoutError
}

func (b *timeoutBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF && context.Cause(b.ctx) == error(b.cause) {
		return n, b.cause
	}
	return n, err
}

func (b *timeoutBody) Close() error {
	err := b.rc.Close()
	b.cancel()
	return err
}
