// Package sesemulator starts aws-ses-v2-local, a local emulator of the SES
// v2 API from npm, for tests that send through the real SES client. It is
// installed by .ci/run when npm is available (MAILROOM_SES_LOCAL_BIN) or
// found on PATH; tests log and return when it is missing.
package sesemulator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Start starts aws-ses-v2-local on a free port and returns its URL,
// or "" (after t.Log) when the emulator is not installed.
func Start(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("MAILROOM_SES_LOCAL_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("aws-ses-v2-local"); err != nil {
			t.Log("aws-ses-v2-local not installed (npm install aws-ses-v2-local, or set MAILROOM_SES_LOCAL_BIN / MAILROOM_SES_LOCAL_URL); emulator test not run")
			return ""
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--host", "127.0.0.1", "--port", fmt.Sprint(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "server running") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("aws-ses-v2-local exited before it was ready")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("aws-ses-v2-local did not start")
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// Email is a message as the emulator's GET /store shows it.
type Email struct {
	MessageID   string `json:"messageId"`
	From        string `json:"from"`
	Subject     string `json:"subject"`
	Destination struct {
		To []string `json:"to"`
	} `json:"destination"`
	Body struct {
		Text string `json:"text"`
		HTML string `json:"html"`
	} `json:"body"`
}

// Stored returns the stored message with the SES message id, failing t
// when the emulator does not have it.
func Stored(t testing.TB, base, messageID string) Email {
	t.Helper()
	resp, err := http.Get(base + "/store")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var store struct {
		Emails []Email `json:"emails"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&store); err != nil {
		t.Fatal(err)
	}
	for _, e := range store.Emails {
		if e.MessageID == messageID {
			return e
		}
	}
	t.Fatalf("message %s not in the emulator's store (%d emails)", messageID, len(store.Emails))
	return Email{}
}
