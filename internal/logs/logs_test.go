package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// lines decodes the JSON lines written so far.
func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestRepeatedWarningsAreFoldedPerWindow(t *testing.T) {
	var b bytes.Buffer
	h := Fold(slog.NewJSONHandler(&b, nil), 30*time.Second).WithAttrs([]slog.Attr{slog.String("worker", "sweep")})
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	log := func(at time.Duration, level slog.Level, msg string, attrs ...slog.Attr) {
		r := slog.NewRecord(t0.Add(at), level, msg, 0)
		r.AddAttrs(attrs...)
		if err := h.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(port string) slog.Attr {
		return slog.Any("err", errors.New("dial 127.0.0.1:"+port+": connection refused"))
	}
	for i := range 20 { // a retry a second, each error worded a little differently
		log(time.Duration(i)*time.Second, slog.LevelWarn, "lock lost", refused(string(rune('a'+i))))
	}
	log(3*time.Second, slog.LevelError, "request failed", slog.String("route", "/v1/emails"), slog.String("request_id", "req_1"))
	log(4*time.Second, slog.LevelError, "request failed", slog.String("route", "/v1/emails"), slog.String("request_id", "req_2"))
	log(5*time.Second, slog.LevelWarn, "send retried", slog.String("email_id", "e1"))
	log(6*time.Second, slog.LevelWarn, "send retried", slog.String("email_id", "e2"))
	log(7*time.Second, slog.LevelInfo, "lock lost")
	log(31*time.Second, slog.LevelWarn, "lock lost", refused("x"))

	got := lines(t, &b)
	var summary []string
	for _, l := range got {
		s := l["level"].(string) + " " + l["msg"].(string)
		if id, ok := l["email_id"]; ok {
			s += " " + id.(string)
		}
		if n, ok := l["repeated"]; ok {
			s += fmt.Sprint(" repeated=", n)
		}
		if l["worker"] != "sweep" {
			t.Errorf("line lost the logger's attributes: %v", l)
		}
		summary = append(summary, s)
	}
	want := []string{
		"WARN lock lost",
		"ERROR request failed",
		"WARN send retried e1",
		"WARN send retried e2",
		"INFO lock lost",
		"WARN lock lost repeated=19",
	}
	if strings.Join(summary, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(summary, "\n"), strings.Join(want, "\n"))
	}
}

func TestDurationsAreText(t *testing.T) {
	var b bytes.Buffer
	New(&b, "json", "info").Info("retry", "retry_in", 1500*time.Millisecond)
	if l := lines(t, &b); len(l) != 1 || l[0]["retry_in"] != "1.5s" {
		t.Errorf("got %s", b.String())
	}
}

func TestRedactedKeepsNoAddressOrURLPath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"RCPT TO:<secret.bcc@example.org>: relay replied 550 5.1.1 <secret.bcc@example.org>: User unknown",
			"RCPT TO:<<address>>: relay replied 550 5.1.1 <<address>>: User unknown"},
		{`Get "https://files.example.com/ann/report-ann.pdf?sig=abc": dial tcp: connection refused`,
			`Get "https://files.example.com/…": dial tcp: connection refused`},
		{"Email address is not verified. The following identities failed the check in region EU-WEST-1: Ann Smith <ann@example.com>, bob@exämple.org",
			"Email address is not verified. The following identities failed the check in region EU-WEST-1: Ann Smith <<address>>, <address>"},
		{"450 4.2.0 mailbox busy", "450 4.2.0 mailbox busy"},
		{"RCPT TO:<patrick.o'brien@dest.org>: 550 'patrick.o'brien@dest.org' unknown", "RCPT TO:<<address>>: 550 <address>' unknown"},
	} {
		if got := Redacted(errors.New(c.in)); got != c.want {
			t.Errorf("Redacted(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
	if Redacted(nil) != "" {
		t.Error("nil error has text")
	}
}

// Lines about ever new things (a provider outage, every email retried)
// neither grow the memory of lines seen past its bound nor slow down, and
// lines older than the window are forgotten.
func TestFoldingRemembersBoundedly(t *testing.T) {
	h := Fold(slog.NewJSONHandler(io.Discard, nil), 30*time.Second).(*folding)
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i := range 50_000 {
		r := slog.NewRecord(t0.Add(time.Duration(i)*time.Millisecond), slog.LevelWarn, "send retried", 0)
		r.AddAttrs(slog.Int("email", i))
		if err := h.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.seen.last); n > maxKeys {
		t.Fatalf("%d lines remembered, bound %d", n, maxKeys)
	}
	r := slog.NewRecord(t0.Add(time.Hour), slog.LevelWarn, "later", 0)
	h.Handle(context.Background(), r)
	if n := len(h.seen.last); n != 1 {
		t.Fatalf("an hour later %d lines remembered, want the last one", n)
	}
}

// A loop's line keeps its count of lines left out while other lines come
// and go around the end of its window.
func TestFoldedCountSurvivesOtherLines(t *testing.T) {
	var b bytes.Buffer
	h := Fold(slog.NewJSONHandler(&b, nil), 30*time.Second)
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	log := func(at time.Duration, msg string) {
		if err := h.Handle(context.Background(), slog.NewRecord(t0.Add(at), slog.LevelWarn, msg, 0)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		log(time.Duration(i)*time.Second, "lock lost")
	}
	log(30500*time.Millisecond, "something else")
	log(31*time.Second, "lock lost")
	got := lines(t, &b)
	if last := got[len(got)-1]; last["msg"] != "lock lost" || last["repeated"] != 29.0 {
		t.Fatalf("last line %v, want lock lost with repeated 29", last)
	}
}

// A warning one failure causes for many emails at once is folded by its
// message: a provider outage with a thousand emails waiting writes a line
// per window, not one per email and retry.
func TestWarningsAboutManyAreFoldedByMessage(t *testing.T) {
	var b bytes.Buffer
	h := Fold(slog.NewJSONHandler(&b, nil), 30*time.Second)
	t0 := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	log := func(ctx context.Context, at time.Duration, id string) {
		r := slog.NewRecord(t0.Add(at), slog.LevelWarn, "email send will be retried", 0)
		r.AddAttrs(slog.String("email_id", id), slog.Duration("retry_in", at))
		if err := h.Handle(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	many := Many(context.Background())
	for i := range 1000 {
		log(many, time.Duration(i)*20*time.Millisecond, fmt.Sprint("e", i))
	}
	log(many, 31*time.Second, "e1000")
	log(context.Background(), 32*time.Second, "e1001") // about one email: its own line
	log(context.Background(), 33*time.Second, "e1002")
	var summary []string
	for _, l := range lines(t, &b) {
		s := l["email_id"].(string)
		if n, ok := l["repeated"]; ok {
			s += fmt.Sprint(" repeated=", n)
		}
		summary = append(summary, s)
	}
	if got, want := strings.Join(summary, " "), "e0 e1000 repeated=999 e1001 e1002"; got != want {
		t.Errorf("lines %q, want %q", got, want)
	}
}
