package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// TestTwoInstances runs two `mailroom serve` processes on one database and
// one outbox: 500 emails sent through both each get one .eml and each of
// their events one successful webhook delivery; killing one instance leaves
// the other projecting and delivering.
func TestTwoInstances(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewURL(t)
	dataDir := t.TempDir()
	dev := []string{"--egress-allow-cidrs", "127.0.0.0/8", "--webhook-allow-http"}

	// The receiver counts successful deliveries per delivery id.
	var mu sync.Mutex
	seen := map[string]int{}    // delivery id → requests
	events := map[string]bool{} // email id + type
	eventDeliveries := map[string]map[string]bool{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev struct {
			Type string
			Data struct {
				EmailID string `json:"email_id"`
			}
		}
		json.Unmarshal(body, &ev)
		key := ev.Data.EmailID + "/" + ev.Type
		mu.Lock()
		seen[r.Header.Get("service-delivery-id")]++
		events[key] = true
		if eventDeliveries[key] == nil {
			eventDeliveries[key] = map[string]bool{}
		}
		eventDeliveries[key][r.Header.Get("service-delivery-id")] = true
		mu.Unlock()
		w.WriteHeader(204)
	}))
	defer rcv.Close()

	addrA, addrB := freeAddr(t), freeAddr(t)
	a := startServe(t, bin, addrA, db, dataDir, append(dev, "--bootstrap")...)
	var key string
	keyLine := regexp.MustCompile(`API key\s+(mr_[0-9A-Za-z]+)`)
	for a.stdout.Scan() {
		if m := keyLine.FindStringSubmatch(a.stdout.Text()); m != nil {
			key = m[1]
			break
		}
	}
	go func() {
		for a.stdout.Scan() {
		}
	}()
	b := startServe(t, bin, addrB, db, dataDir, dev...)

	do := func(addr, method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// Errorf, not Fatalf: the senders run in goroutines of their
			// own, and each must go on taking work or the feed would block.
			t.Errorf("%s %s: %v", method, path, err)
			return 0, nil
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	if code, body := do(addrA, "POST", "/v1/webhooks", fmt.Sprintf(`{"url": %q}`, rcv.URL)); code != 201 {
		t.Fatalf("endpoint: %d %s", code, body)
	}

	send := func(addr string, i int) string {
		code, body := do(addr, "POST", "/v1/emails/send", fmt.Sprintf(`{"from":"app@example.test","to":"user%d@example.org","subject":"both %d","text":"hi"}`, i, i))
		if code != 202 {
			t.Errorf("send %d via %s: %d %s", i, addr, code, body)
			return ""
		}
		var out struct{ ID string }
		json.Unmarshal(body, &out)
		return out.ID
	}
	var ids sync.Map
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				addr := addrA
				if i%2 == 1 {
					addr = addrB
				}
				if id := send(addr, i); id != "" {
					ids.Store(id, true)
				}
			}
		}()
	}
	for i := range 500 {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow() // sends were refused: the events cannot all come
	}

	wantEvents := func(n int) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			mu.Lock()
			got := len(events)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("receiver got %d distinct events, want %d", got, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wantEvents(1000)        // email.sent and email.delivered of each
	time.Sleep(time.Second) // let any duplicate show itself
	mu.Lock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("delivery %s arrived %d times", id, n)
		}
	}
	for ev, ds := range eventDeliveries {
		if len(ds) != 1 {
			t.Errorf("event %s had %d deliveries", ev, len(ds))
		}
	}
	mu.Unlock()
	files, _ := filepath.Glob(filepath.Join(dataDir, "outbox", "*.eml"))
	if len(files) != 500 {
		t.Fatalf("%d .eml files, want 500", len(files))
	}
	ids.Range(func(k, _ any) bool {
		if _, err := os.Stat(filepath.Join(dataDir, "outbox", k.(string)+".eml")); err != nil {
			t.Errorf("email %s has no .eml", k)
		}
		return true
	})

	// Kill A; B carries on: its sends are projected and delivered, and the
	// projections' lag returns to zero.
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.cmd.Wait()
	for i := 500; i < 520; i++ {
		send(addrB, i)
	}
	wantEvents(1040)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _, err := run(t, "projections", "status", "--json", "--database-url", db, "--data-dir", t.TempDir(), "--master-key", apptest.MasterKey)
		if err != nil {
			t.Fatal(err)
		}
		var st struct{ Projections []struct{ Lag int64 } }
		json.Unmarshal([]byte(out), &st)
		lag := int64(0)
		for _, p := range st.Projections {
			lag += p.Lag
		}
		if lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("projections still lag %d events a minute after the last webhooks arrived", lag)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = b
}
