package scan

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shortSocketPath returns a unix socket path short enough for sun_path
// (t.TempDir() paths can exceed its 108 bytes).
func shortSocketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "clamd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "c.sock")
}

func TestClamdFound(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			fake := newFakeClamd(t, network)
			s := New(fake.Addr(), 5*time.Second)
			ctx := context.Background()
			want := Verdict{Blocked: true, Reason: "malware detected: " + fakeVirusName}

			v, err := s.ScanAttachment(ctx, "report.pdf", []byte("%PDF "+fakeVirusMarker))
			if err != nil || v != want {
				t.Fatalf("attachment: %+v, %v; want %+v", v, err, want)
			}
			v, err = s.ScanBody(ctx, []byte("<p>"+fakeVirusMarker+"</p>"))
			if err != nil || v != want {
				t.Fatalf("body: %+v, %v; want %+v", v, err, want)
			}
			v, err = s.ScanAttachment(ctx, "report.pdf", []byte("%PDF clean"))
			if err != nil || v.Blocked {
				t.Fatalf("clean: %+v, %v", v, err)
			}
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			if n := fake.scans.Load(); n != 3 {
				t.Errorf("clamd got %d scans, want 3", n)
			}
		})
	}
}

func TestClamdMultiChunkStream(t *testing.T) {
	fake := newFakeClamd(t, "tcp")
	s := New(fake.Addr(), 5*time.Second)
	// The marker straddles the first chunk boundary, and the stream spans
	// several chunks plus a partial one.
	content := bytes.Repeat([]byte{'a'}, 3*clamdChunkSize+123)
	copy(content[clamdChunkSize-5:], fakeVirusMarker)
	v, err := s.ScanAttachment(context.Background(), "big.bin", content)
	if err != nil || !v.Blocked {
		t.Fatalf("%+v, %v", v, err)
	}
	v, err = s.ScanAttachment(context.Background(), "empty.txt", nil)
	if err != nil || v.Blocked {
		t.Fatalf("empty: %+v, %v", v, err)
	}
}

func TestClamdNotConsultedForBuiltInBlocks(t *testing.T) {
	fake := newFakeClamd(t, "tcp")
	s := New(fake.Addr(), 5*time.Second)
	ctx := context.Background()
	if v, _ := s.ScanAttachment(ctx, "a.exe", []byte("x")); !v.Blocked {
		t.Fatal("exe not blocked")
	}
	if v, _ := s.ScanBody(ctx, eicar); !v.Blocked {
		t.Fatal("EICAR not blocked")
	}
	if n := fake.scans.Load(); n != 0 {
		t.Errorf("clamd got %d scans, want 0", n)
	}
}

func TestClamdUnreachableIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now

	for _, addr := range []string{addr, "unix:" + shortSocketPath(t)} {
		s := New(addr, 2*time.Second)
		v, err := s.ScanAttachment(context.Background(), "invoice.pdf", []byte("clean"))
		if err == nil || !errors.Is(err, ErrClamd) {
			t.Errorf("%s: ScanAttachment = %+v, %v; want an ErrClamd error", addr, v, err)
		}
		if v.Blocked {
			t.Errorf("%s: a scanner failure must not be a verdict: %+v", addr, v)
		}
		if _, err := s.ScanBody(context.Background(), []byte("clean")); err == nil {
			t.Errorf("%s: ScanBody: want error", addr)
		}
		if err := s.Ping(context.Background()); err == nil {
			t.Errorf("%s: Ping: want error", addr)
		}
	}
}

func TestClamdTimeout(t *testing.T) {
	fake := newFakeClamd(t, "tcp")
	fake.stall.Store(true)
	s := New(fake.Addr(), 200*time.Millisecond)
	start := time.Now()
	_, err := s.ScanBody(context.Background(), []byte("clean"))
	if err == nil || !errors.Is(err, ErrClamd) || !strings.Contains(err.Error(), "no verdict within 200ms") {
		t.Fatalf("stalled clamd: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s, want about the 200ms timeout", d)
	}
}

func TestClamdContextCancel(t *testing.T) {
	fake := newFakeClamd(t, "tcp")
	fake.stall.Store(true)
	s := New(fake.Addr(), time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.ScanBody(ctx, []byte("clean"))
	if err == nil || !errors.Is(err, ErrClamd) {
		t.Fatalf("cancelled scan: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s after cancel", d)
	}
}

func TestClamdStreamLimitIsAnError(t *testing.T) {
	fake := newFakeClamd(t, "tcp")
	fake.maxStream = 100 << 10
	s := New(fake.Addr(), 5*time.Second)
	v, err := s.ScanAttachment(context.Background(), "big.pdf", bytes.Repeat([]byte("x"), 4<<20))
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrClamd) || v.Blocked {
		t.Fatalf("over clamd's stream limit: %+v, %v; want ErrTooLarge", v, err)
	}
}

func TestParseClamdReply(t *testing.T) {
	c := newClamdClient("127.0.0.1:3310", time.Second)
	cases := []struct {
		reply, name string
		wantErr     bool
	}{
		{"stream: OK", "", false},
		{"stream: Win.Test.EICAR_HDB-1 FOUND", "Win.Test.EICAR_HDB-1", false},
		{"stream: Eicar-Signature FOUND\n", "Eicar-Signature", false},
		{"1: stream: Eicar-Signature FOUND", "Eicar-Signature", false},
		{"INSTREAM size limit exceeded. ERROR", "", true},
		{"stream: Can't allocate memory ERROR", "", true},
		{"stream: INSTREAM size limit exceeded. ERROR", "", true},
		{"stream:  FOUND", "", true},
		{"UNKNOWN COMMAND", "", true},
		{"", "", true},
	}
	for _, tc := range cases {
		name, err := c.parseReply(tc.reply)
		if tooLarge := strings.Contains(tc.reply, "size limit"); errors.Is(err, ErrTooLarge) != tooLarge {
			t.Errorf("parseReply(%q): %v; ErrTooLarge %v", tc.reply, err, tooLarge)
		}
		if name != tc.name || (err != nil) != tc.wantErr {
			t.Errorf("parseReply(%q) = %q, %v; want %q, error %v", tc.reply, name, err, tc.name, tc.wantErr)
		}
	}
}

func TestClamdAddressForms(t *testing.T) {
	for addr, want := range map[string][2]string{
		"127.0.0.1:3310":               {"tcp", "127.0.0.1:3310"},
		"tcp://clamav:3310":            {"tcp", "clamav:3310"},
		"unix:/run/clamav/clamd.ctl":   {"unix", "/run/clamav/clamd.ctl"},
		"unix:///run/clamav/clamd.ctl": {"unix", "/run/clamav/clamd.ctl"},
	} {
		c := newClamdClient(addr, time.Second)
		if c.network != want[0] || c.addr != want[1] {
			t.Errorf("%q → %s %s, want %v", addr, c.network, c.addr, want)
		}
	}
}

// TestClamdLive runs against a real clamd when MAILROOM_TEST_CLAMD_ADDR is
// set ("host:port" or "unix:/path").
func TestClamdLive(t *testing.T) {
	addr := os.Getenv("MAILROOM_TEST_CLAMD_ADDR")
	if addr == "" {
		t.Log("MAILROOM_TEST_CLAMD_ADDR not set; live clamd test not run")
		return
	}
	s := New(addr, 30*time.Second)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := s.ScanAttachment(ctx, "invoice.pdf", []byte("%PDF-1.7 nothing to see")); err != nil || v.Blocked {
		t.Fatalf("clean content: %+v, %v", v, err)
	}
	// Bypass the built-in check so clamd itself must find EICAR.
	name, err := s.clamd.scan(ctx, eicar)
	if err != nil || name == "" {
		t.Fatalf("clamd on EICAR: %q, %v", name, err)
	}
	t.Logf("clamd names EICAR %q", name)
}
