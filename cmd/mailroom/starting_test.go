package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// An API process of a release that changed a read model's version waits,
// at start, for a projections process of its release to rebuild it, which
// on a large log takes long. Meanwhile it answers its probes as
// Kubernetes needs: /healthz alive (else its liveness probe restarts it,
// and its start never ends) and /readyz not ready, saying why.
func TestServeWaitingForARebuildAnswersItsProbes(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewURL(t)
	opened, err := app.Open(context.Background(), apptest.Config(t, db), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// As if this release had raised the emails projection's version.
	if _, err := opened.Pool.Exec(context.Background(), "UPDATE projection_checkpoints SET schema_version = schema_version - 1 WHERE name = $1",
		string(projections.EmailsName)); err != nil {
		t.Fatal(err)
	}
	opened.Close()

	addr, ops := freeAddr(t), freeAddr(t)
	dataDir := t.TempDir()
	cmd := exec.Command(bin, "serve", "--roles", "api", "--http-addr", addr, "--ops-addr", ops, "--data-dir", dataDir,
		"--blob-dir", filepath.Join(dataDir, "blobs"), "--dns-resolvers", "127.0.0.1:9", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "MAILROOM_DATABASE_URL="+db, "MAILROOM_MASTER_KEY="+apptest.MasterKey)
	cmd.Stderr = os.Stderr
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := apptest.Probe("http://" + ops + "/readyz")
		if code == 503 && strings.Contains(body, "waiting for a projections process of this release to rebuild") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("operator /readyz never said it waits for the rebuild; last: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, base := range []string{addr, ops} {
		if code, body := apptest.Probe("http://" + base + "/healthz"); code != 200 {
			t.Errorf("%s/healthz while waiting for the rebuild: %d %s", base, code, body)
		}
	}
	if code, body := apptest.Probe("http://" + addr + "/readyz"); code != 503 {
		t.Errorf("/readyz while waiting for the rebuild: %d %s", code, body)
	}
}

// A process started before its database answers (a machine's boot, a
// compose file, a failover under way) waits for it, answering its probes
// meanwhile, and serves once it answers, instead of exiting for a
// supervisor to start again.
func TestServeStartedBeforeItsDatabaseServesOnceItAnswers(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	db, err := url.Parse(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// The process reaches the database through a port where nothing
	// listens until the test forwards it to the real server.
	server := db.Host
	db.Host = freeAddr(t)
	addr, ops := freeAddr(t), freeAddr(t)
	dataDir := t.TempDir()
	cmd := exec.Command(bin, "serve", "--http-addr", addr, "--ops-addr", ops, "--data-dir", dataDir,
		"--sandbox-outbox", filepath.Join(dataDir, "outbox"), "--blob-dir", filepath.Join(dataDir, "blobs"),
		"--dns-resolvers", "127.0.0.1:9", "--log-level", "error")
	cmd.Env = append(os.Environ(), "MAILROOM_DATABASE_URL="+db.String(), "MAILROOM_MASTER_KEY="+apptest.MasterKey)
	cmd.Stderr = os.Stderr
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waited error
	exited := make(chan struct{})
	go func() { waited = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	until := func(what, url string, ok func(code int, body string) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, body := apptest.Probe(url)
			if ok(code, body) {
				return
			}
			select {
			case <-exited:
				t.Fatalf("the process exited (%v) before %s", waited, what)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never; last %d %s", what, code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	until("/readyz says it waits for the database", "http://"+ops+"/readyz", func(code int, body string) bool {
		return code == 503 && strings.Contains(body, "waiting for the database: connect: connection refused")
	})
	// Through a few of its tries.
	time.Sleep(3 * time.Second)
	if code, body := apptest.Probe("http://" + addr + "/healthz"); code != 200 || !strings.Contains(body, "starting") {
		t.Fatalf("/healthz while waiting for the database: %d %s", code, body)
	}

	forward(t, db.Host, server)
	until("it serves", "http://"+addr+"/healthz", func(code int, body string) bool {
		return code == 200 && strings.Contains(body, `"ok"`)
	})
	until("it is ready", "http://"+ops+"/readyz", func(code int, _ string) bool { return code == 200 })
}

// forward accepts connections at addr and joins each to one of its own to
// to, until the test ends.
func forward(t *testing.T, addr, to string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
}
