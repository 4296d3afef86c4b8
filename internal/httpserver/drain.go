package httpserver

import (
	"io"
	"net/http"
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
// Retry-After. So, as nginx's lingering close does, the rest is read and
// thrown away, up to a bound in bytes and in time (nginx's lingering_time,
// within the server's read timeout), once the answer is out.
const (
	maxDrainBytes = 128 << 20
	maxDrainTime  = 30 * time.Second
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
		r.Body = body
		h.ServeHTTP(w, r)
		if body.eof.Load() || body.failed.Load() || r.ContentLength > maxDrainBytes {
			return // read whole, or cut off (a timeout, a client gone), or too long to wait for
		}
		// A client that asked before sending (Expect: 100-continue) and
		// got its answer instead sends nothing more.
		if body.n.Load() == 0 && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			return
		}
		rc := http.NewResponseController(w)
		if rc.Flush() != nil {
			return
		}
		deadline := time.Now().Add(maxDrainTime)
		if end := start.Add(readTimeout); readTimeout > 0 && end.Before(deadline) {
			deadline = end
		}
		_ = rc.SetReadDeadline(deadline)
		_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrainBytes-body.n.Load()))
	})
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
