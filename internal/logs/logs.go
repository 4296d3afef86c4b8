// Package logs builds the process's structured logger and keeps personal
// data out of the lines it writes.
package logs

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// New returns the logger every part of a process writes to: JSON or text at
// level ("debug", "info", "warn", "error"; anything else is info).
// Durations are written as text ("1.5s"), and a warning or error repeated
// within FoldWindow is folded into the next one past it (see Fold).
func New(w io.Writer, format, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationText}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if strings.EqualFold(format, "json") {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(Fold(h, FoldWindow))
}

// durationText writes durations as Go duration strings: a bare integer of
// nanoseconds reads as anything.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// FoldWindow is how long a repeated warning stays folded.
const FoldWindow = 30 * time.Second

// Fold passes on every record below warning level, and a warning or error
// only when the same message with the same attributes (errors aside) has not
// been passed on within window; the next one past it says how many were
// left out as "repeated". Loops that retry every second while a database is
// down (job fetching, lock keeping, projectors) then write a line per
// window instead of one per try, while lines about different emails,
// requests or endpoints, which differ in their ids, all pass.
func Fold(next slog.Handler, window time.Duration) slog.Handler {
	return &folding{next: next, window: window, seen: &seen{last: map[string]*fold{}}}
}

type folding struct {
	next   slog.Handler
	window time.Duration
	prefix string // the attributes and groups added by With
	seen   *seen
}

type seen struct {
	mu    sync.Mutex
	last  map[string]*fold
	order []passed // the lines passed on, oldest first from head (some since passed again)
	head  int
}

type passed struct {
	key string
	at  time.Time
}

type fold struct {
	at     time.Time // when the line was last passed on
	folded int       // lines left out since
}

// unfolded are the attributes that do not tell lines apart: errors, whose
// text varies while a failure lasts, and request ids, so that a route
// failing on every request during an outage writes a line per window.
var unfolded = map[string]bool{"err": true, "error": true, "request_id": true, "client_request_id": true}

// maxKeys bounds the lines remembered. Lines older than two windows are
// forgotten first; when every remembered line is younger, a new one is
// passed on without being remembered (so it is not folded).
const maxKeys = 4096

func (h *folding) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

type changeKey struct{}

// Change marks ctx for a line that reports a change of state, which its
// writer already writes once per change (readiness lost): Fold passes such
// a warning on however recently the same was, so that each change of a
// state that flaps shows.
func Change(ctx context.Context) context.Context { return context.WithValue(ctx, changeKey{}, true) }

type manyKey struct{}

// Many marks ctx for a warning that one failure causes for many subjects
// at once (every email's retry while the provider is down): Fold folds it
// by its message alone, ids and all, so that an outage writes a line per
// window however many emails wait, the line passed on naming one of them.
func Many(ctx context.Context) context.Context { return context.WithValue(ctx, manyKey{}, true) }

func (h *folding) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || ctx.Value(changeKey{}) != nil {
		return h.next.Handle(ctx, r)
	}
	var key strings.Builder
	key.WriteString(h.prefix)
	key.WriteString(r.Level.String())
	key.WriteString("\x00")
	key.WriteString(r.Message)
	if ctx.Value(manyKey{}) == nil {
		r.Attrs(func(a slog.Attr) bool {
			if !unfolded[a.Key] {
				key.WriteString("\x00" + a.String())
			}
			return true
		})
	}
	k, now := key.String(), r.Time
	h.seen.mu.Lock()
	f := h.seen.last[k]
	if f != nil && now.Sub(f.at) < h.window {
		f.folded++
		h.seen.mu.Unlock()
		return nil
	}
	folded := 0
	if f != nil {
		folded = f.folded
	}
	h.seen.forget(now, h.window)
	if f != nil || len(h.seen.last) < maxKeys {
		h.seen.last[k] = &fold{at: now}
		h.seen.order = append(h.seen.order, passed{k, now})
	}
	h.seen.mu.Unlock()
	if folded > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", folded))
	}
	return h.next.Handle(ctx, r)
}

// forget drops the lines passed on more than two windows ago, oldest
// first: a line that recurs is met again within that, with its count of
// lines left out. It is called with mu held.
func (s *seen) forget(now time.Time, window time.Duration) {
	for ; s.head < len(s.order) && now.Sub(s.order[s.head].at) >= 2*window; s.head++ {
		p := s.order[s.head]
		if f := s.last[p.key]; f != nil && f.at.Equal(p.at) { // not passed on again since
			delete(s.last, p.key)
		}
	}
	if s.head > len(s.order)/2 { // reuse the slice once half of it is spent
		s.order = append(s.order[:0], s.order[s.head:]...)
		s.head = 0
	}
}

func (h *folding) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	for _, a := range as {
		c.prefix += a.String() + "\x00"
	}
	return &c
}

func (h *folding) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.prefix += name + ".\x00"
	return &c
}

// Addresses and the paths and queries of URLs, as error texts from relays,
// providers and HTTP clients carry them: "RCPT TO:<ann@example.com>",
// `Get "https://files.example.com/ann/cv.pdf"`.
var (
	address = regexp.MustCompile(`[^\s<>"(),;:\[\]@]+@[^\s<>"'(),;:\[\]@]+`)
	urlPath = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^/\s"'<>?#]+)[/?#][^\s"'<>]*`)
)

// Redacted is err's text without what may name a person: email addresses
// become "<address>" and URLs keep their scheme and host only. Application
// logs cannot be erased as an email's personal data can, so the pipeline's
// failure lines pass through it.
func Redacted(err error) string {
	if err == nil {
		return ""
	}
	s := urlPath.ReplaceAllString(err.Error(), "$1/…")
	return address.ReplaceAllString(s, "<address>")
}
