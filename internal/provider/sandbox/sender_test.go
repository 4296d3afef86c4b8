package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/provider/sandbox"
)

func outboxFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSendWritesOnce(t *testing.T) {
	dir := t.TempDir()
	o, err := sandbox.NewOutbox(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := provider.Outbound{EmailID: "e1", Raw: []byte("Subject: hi\r\n\r\nhello\r\n")}
	for range 2 {
		id, err := o.Send(context.Background(), m)
		if err != nil || id != sandbox.MessageID("e1") {
			t.Fatalf("send: %q %v", id, err)
		}
	}
	if got := outboxFiles(t, dir); len(got) != 1 || got[0] != "e1.eml" {
		t.Fatalf("outbox holds %q, want e1.eml alone", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "e1.eml")); string(b) != string(m.Raw) {
		t.Fatalf("e1.eml holds %q", b)
	}
}

// TestLatencyWaitsBeforeWriting checks that a slow outbox takes at least its
// latency to accept a message, and writes it after the wait.
func TestLatencyWaitsBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	const latency = 30 * time.Millisecond
	o, err := sandbox.NewOutbox(dir, latency)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := o.Send(context.Background(), provider.Outbound{EmailID: "e1", Raw: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < latency {
		t.Fatalf("send took %s, below the latency of %s", took, latency)
	}
	if got := outboxFiles(t, dir); len(got) != 1 {
		t.Fatalf("outbox holds %q after the send", got)
	}
}

// TestLatencyHonoursContext checks that a send whose context ends during
// the wait returns the context's error and writes nothing: with an hour of
// latency, the test only finishes because the wait is cut short.
func TestLatencyHonoursContext(t *testing.T) {
	dir := t.TempDir()
	o, err := sandbox.NewOutbox(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := o.Send(ctx, provider.Outbound{EmailID: "e1", Raw: []byte("x")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send with a deadline inside the wait: %v", err)
	}
	done, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if _, err := o.Send(done, provider.Outbound{EmailID: "e2", Raw: []byte("x")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("send with a cancelled context: %v", err)
	}
	if got := outboxFiles(t, dir); len(got) != 0 {
		t.Fatalf("outbox holds %q after cancelled sends", got)
	}
}

func TestNegativeLatencyRefused(t *testing.T) {
	if _, err := sandbox.NewOutbox(t.TempDir(), -time.Second); err == nil {
		t.Fatal("a negative latency was accepted")
	}
}

func TestSimulateAnswersLikeTheSESMailboxSimulator(t *testing.T) {
	for addr, want := range map[string]sandbox.Outcome{
		"success@simulator.amazonses.com":                 {Delivered: true},
		"ooto@simulator.amazonses.com":                    {Delivered: true},
		"Bounce@Simulator.AmazonSES.com":                  {Bounced: true, BounceType: "Permanent", BounceSubtype: "General"},
		"Tester <bounce+order-7@simulator.amazonses.com>": {Bounced: true, BounceType: "Permanent", BounceSubtype: "General"},
		"complaint+x@simulator.amazonses.com":             {Delivered: true, Complained: true},
		"suppressionlist+a+b@simulator.amazonses.com":     {Bounced: true, BounceType: "Permanent", BounceSubtype: "OnAccountSuppressionList"},
		"bounce+label@example.org":                        {Delivered: true},
		"bounce@simulator.amazonses.com.example.org":      {Delivered: true},
	} {
		if got := sandbox.Simulate(addr); got != want {
			t.Errorf("Simulate(%q) = %+v, want %+v", addr, got, want)
		}
	}
}
