package httpserver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Draining a body the answer did not need: a refusal decided before the
// body is read (a wrong key, 413 by Content-Length, 429, 503 server_busy)
// leaves it unread, and net/http then closes the connection with the
// client's bytes still arriving, which resets it. Clients that send the
// whole body before reading the answer (Python's urllib and requests
// among them) then get a connection reset instead of the problem and its
// Retry-After. So, as nginx's lingering close does, the rest of the body
// is read and thrown away, up to a bound in bytes and in time (nginx's
// lingering_time, within the server's read timeout). A body of declared
// length gets its answer first, whole (with its Content-Length, so a
// client that stops sending has all of it), then the drain. A chunked
// body is drained before its answer goes out: net/http closes a chunked
// body once an answer starts (it cannot tell how much is left), and a
// client still sending would then be reset.
const (
	maxDrainBytes = 128 << 20
	maxDrainTime  = 30 * time.Second
	// maxHeldAnswer is the most of an answer to a request with a body
	// that is held back until the handler ends, so that its length is
	// known; refusals are far smaller, and a longer answer goes out as
	// it is written.
	maxHeldAnswer = 64 << 10
)

// drainUnread serves h, then reads what is left of the request's body;
// readTimeout is the server's, which bounds the drain as it bounds any
// upload.
func drainUnread(h http.Handler, readTimeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ProtoMajor != 1 {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		body := &readCount{ReadCloser: r.Body}
		// On a copy: net/http looks at its own request's body when the
		// answer starts, and one of a type it does not know it reads
		// first, holding the answer while the client sends.
		r = r.WithContext(context.WithValue(r.Context(), servedSinceKey{}, start))
		r.Body = body
		answer := &heldAnswer{w: w}
		h.ServeHTTP(answer, r)
		if body.eof.Load() || body.failed.Load() || r.ContentLength > maxDrainBytes ||
			// A client that asked before sending (Expect: 100-continue)
			// and got its answer instead sends nothing more.
			body.n.Load() == 0 && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			answer.release(true)
			return
		}
		rc := http.NewResponseController(w)
		drain := func() {
			deadline := time.Now().Add(maxDrainTime)
			if end := start.Add(readTimeout); readTimeout > 0 && end.Before(deadline) {
				deadline = end
			}
			_ = rc.SetReadDeadline(deadline)
			_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrainBytes-body.n.Load()))
		}
		if r.ContentLength < 0 && !answer.gone {
			drain()
			answer.release(true)
			return
		}
		answer.release(true)
		if rc.Flush() == nil {
			drain()
		}
	})
}

// heldAnswer holds an answer back, up to maxHeldAnswer, until the handler
// ends or flushes.
type heldAnswer struct {
	w      http.ResponseWriter
	status int
	buf    bytes.Buffer
	gone   bool // written through to w
}

func (a *heldAnswer) Header() http.Header { return a.w.Header() }

func (a *heldAnswer) WriteHeader(status int) {
	if a.status == 0 && status >= 200 {
		a.status = status
	}
}

func (a *heldAnswer) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if !a.gone && a.buf.Len()+len(p) <= maxHeldAnswer {
		return a.buf.Write(p)
	}
	a.release(false)
	return a.w.Write(p)
}

// Flush sends what is held, then flushes: an answer that flushes means to
// go out as it is written.
func (a *heldAnswer) Flush() {
	a.release(false)
	if f, ok := a.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (a *heldAnswer) Unwrap() http.ResponseWriter { return a.w }

// release writes the held answer through; sized gives it its length,
// unless it has one or may have no body.
func (a *heldAnswer) release(sized bool) {
	if a.gone {
		return
	}
	a.gone = true
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if sized && a.status != http.StatusNoContent && a.status != http.StatusNotModified && a.w.Header().Get("Content-Length") == "" {
		a.w.Header().Set("Content-Length", strconv.Itoa(a.buf.Len()))
	}
	a.w.WriteHeader(a.status)
	if a.buf.Len() > 0 {
		_, _ = a.w.Write(a.buf.Bytes())
	}
}

// readCount is a request body that knows how much of it was read, and
// whether to its end or to an error.
type readCount struct {
	io.ReadCloser
	n      atomic.Int64
	eof    atomic.Bool
	failed atomic.Bool
}

func (b *readCount) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case err != nil:
		b.failed.Store(true)
	}
	return n, err
}

type servedSinceKey struct{}

// servedSince is when the handlers began to serve r, its headers read,
// and whether that is known (a request with a body over HTTP/1).
func servedSince(r *http.Request) (time.Time, bool) {
	t, ok := r.Context().Value(servedSinceKey{}).(time.Time)
	return t, ok
}
