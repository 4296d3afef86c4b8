package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// binDir holds the binary buildBinary makes; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary compiles mailroom once for the tests that run it as a process.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "mailroom-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "mailroom")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

type process struct {
	cmd    *exec.Cmd
	stdout *bufio.Scanner
	addr   string
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServe runs `mailroom serve` and waits until it serves: /healthz
// answers "ok", no longer "starting".
func startServe(t *testing.T, bin, addr, db, dataDir string, extra ...string) *process {
	t.Helper()
	args := append([]string{"serve", "--http-addr", addr, "--data-dir", dataDir,
		"--sandbox-outbox", filepath.Join(dataDir, "outbox"), "--blob-dir", filepath.Join(dataDir, "blobs"),
		"--dns-resolvers", "127.0.0.1:9", "--rate-limit", "0", "--log-level", "warn",
		"--send-concurrency", "2"}, extra...)
	cmd := exec.Command(bin, args...)
	// Connection strings go through the environment, as in production: the
	// command line is visible to every user of the machine.
	cmd.Env = append(os.Environ(), "MAILROOM_DATABASE_URL="+db+"&pool_max_conns=12", "MAILROOM_MASTER_KEY="+apptest.MasterKey)
	cmd.Stderr = os.Stderr
	dieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, stdout: bufio.NewScanner(out), addr: addr}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `"ok"`) { // not "starting"
				return p
			}
			err = errors.New(string(body))
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailroom serve did not come up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCrashWhileSending kills the server with SIGKILL while 200 emails are
// in flight, restarts it, and checks every accepted email reaches a final
// state with exactly one .eml for each email that was sent.
func TestCrashWhileSending(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewURL(t)
	dataDir := t.TempDir()
	addr := freeAddr(t)

	first := startServe(t, bin, addr, db, dataDir, "--bootstrap")
	var key string
	keyLine := regexp.MustCompile(`API key\s+(mr_[0-9A-Za-z]+)`)
	for first.stdout.Scan() {
		if m := keyLine.FindStringSubmatch(first.stdout.Text()); m != nil {
			key = m[1]
			break
		}
	}
	if key == "" {
		t.Fatal("no API key printed on first start")
	}
	go func() { // keep draining stdout
		for first.stdout.Scan() {
		}
	}()

	send := func(i int) (string, error) {
		body := fmt.Sprintf(`{"from":"app@example.test","to":"user%d@example.org","subject":"crash %d","text":"hello"}`, i, i)
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/emails/send", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var out struct{ ID string }
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != 202 {
			return "", fmt.Errorf("status %d", resp.StatusCode)
		}
		return out.ID, nil
	}

	// 200 sends from 8 clients; the server is killed after the 80th answer.
	var mu sync.Mutex
	accepted := map[string]bool{}
	var wg sync.WaitGroup
	next := make(chan int)
	killed := make(chan struct{})
	var once sync.Once
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for {
					id, err := send(i)
					if err == nil {
						mu.Lock()
						accepted[id] = true
						n := len(accepted)
						mu.Unlock()
						if n == 80 {
							once.Do(func() {
								first.cmd.Process.Signal(syscall.SIGKILL)
								first.cmd.Wait()
								close(killed)
							})
						}
						break
					}
					// The server is down: wait for the restart, then retry.
					<-killed
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	go func() {
		for i := range 200 {
			next <- i
		}
		close(next)
	}()
	<-killed
	startServe(t, bin, addr, db, dataDir)
	wg.Wait()
	if len(accepted) != 200 {
		t.Fatalf("%d emails accepted, want 200", len(accepted))
	}

	// Every email the server holds reaches a final state.
	final := map[string]bool{"delivered": true, "bounced": true, "complained": true, "failed": true}
	type item struct{ ID, Status string }
	var all []item
	deadline := time.Now().Add(120 * time.Second)
	for {
		all = all[:0]
		for page := 1; ; page++ {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/v1/emails?per_page=100&page=%d", addr, page), nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Data []item
			}
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			all = append(all, body.Data...)
			if len(body.Data) < 100 {
				break
			}
		}
		pending := 0
		for _, e := range all {
			if !final[e.Status] {
				pending++
			}
		}
		if pending == 0 && len(all) >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d emails still not final", pending, len(all))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for id := range accepted {
		found := false
		for _, e := range all {
			found = found || e.ID == id
		}
		if !found {
			t.Fatalf("accepted email %s is missing", id)
		}
	}
	// Exactly one .eml per delivered email, none for others, nothing else.
	files, err := filepath.Glob(filepath.Join(dataDir, "outbox", "*.eml"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]int{}
	for _, f := range files {
		onDisk[strings.TrimSuffix(filepath.Base(f), ".eml")]++
	}
	for _, e := range all {
		want := 0
		if e.Status == "delivered" {
			want = 1
		}
		if onDisk[e.ID] != want {
			t.Errorf("email %s (%s) has %d .eml files, want %d", e.ID, e.Status, onDisk[e.ID], want)
		}
		delete(onDisk, e.ID)
	}
	if len(onDisk) != 0 {
		t.Errorf(".eml files of no email: %v", onDisk)
	}
}

// On SIGTERM an API process first answers /readyz with 503 while it still
// serves (MAILROOM_SHUTDOWN_DELAY), so a load balancer stops sending to it
// before its listener closes, then exits 0. A second signal ends it at once.
func TestStopSignalDrainsThenExits(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewURL(t)
	// A delay the checks below fit in however slow the machine.
	p := startServe(t, bin, freeAddr(t), db, t.TempDir(), "--shutdown-delay", "15s")
	go func() {
		for p.stdout.Scan() {
		}
	}()
	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + p.addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var body strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
		return resp.StatusCode, body.String(), nil
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _, _ := get("/readyz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
	}
	exited := make(chan error, 1)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { exited <- p.cmd.Wait() }()
	// The signal takes a moment to arrive; within the delay the listener
	// still answers, and /readyz turns 503.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body, err := get("/readyz")
		if err != nil {
			t.Fatalf("/readyz after SIGTERM: %v, want 503 while still listening", err)
		}
		if code == 503 && strings.Contains(body, "shutting down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after SIGTERM: %d %q, want 503", code, body)
		}
	}
	if code, _, err := get("/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz during the shutdown delay: %d %v", code, err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("did not exit after SIGTERM")
	}

	// A second signal does not wait for the delay.
	p2 := startServe(t, bin, freeAddr(t), db, t.TempDir(), "--shutdown-delay", "10m")
	go func() {
		for p2.stdout.Scan() {
		}
	}()
	exited2 := make(chan error, 1)
	p2.cmd.Process.Signal(syscall.SIGTERM)
	go func() { exited2 <- p2.cmd.Wait() }()
	p = p2
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _, _ := get("/readyz"); code == 503 {
			break // the first signal has arrived
		}
		if time.Now().After(deadline) {
			t.Fatal("the first SIGTERM never arrived")
		}
	}
	p2.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited2:
	case <-time.After(60 * time.Second):
		t.Fatal("a second SIGTERM did not end the process")
	}
}

// An operator command cut short by Ctrl-C exits as the signal would have
// ended it (130), not as a failure (1): here a rebuild waiting for another
// rebuild of the same projection.
func TestAnInterruptedCommandExitsAsTheSignalWould(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewURL(t)
	if _, _, err := run(t, "migrate", "--database-url", db); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := database.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(pglock.Rebuild("accounts"))); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "projections", "rebuild", "accounts", "--data-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "MAILROOM_DATABASE_URL="+db, "MAILROOM_MASTER_KEY="+apptest.MasterKey)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// It says why it does not start, then waits (ended, should it not say).
	watchdog := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer watchdog.Stop()
	lines := bufio.NewScanner(stderr)
	var said []string
	for lines.Scan() {
		said = append(said, lines.Text())
		if strings.Contains(lines.Text(), "another process is rebuilding this projection") && strings.Contains(lines.Text(), "projection=accounts") {
			break
		}
	}
	if lines.Err() != nil || !strings.Contains(strings.Join(said, "\n"), "another process is rebuilding") {
		cmd.Process.Kill()
		t.Fatalf("the rebuild did not say it waits for the other one (%v):\n%s", lines.Err(), strings.Join(said, "\n"))
	}
	cmd.Process.Signal(os.Interrupt)
	rest, _ := io.ReadAll(stderr)
	err = cmd.Wait()
	var exit *exec.ExitError
	// Ended by the signal itself (a shell shows status 130 and stops a
	// script), or with 130 where SIGINT was ignored at start (the child
	// inherits this process's ignored SIGINT, and only then).
	ignored := signal.Ignored(syscall.SIGINT)
	if !errors.As(err, &exit) || (ignored && exit.ExitCode() != 130) || (!ignored && !endedBy(exit, syscall.SIGINT)) {
		t.Fatalf("interrupted rebuild: %v, want exit status 130\n%s", err, rest)
	}
}

func endedBy(exit *exec.ExitError, sig syscall.Signal) bool {
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
