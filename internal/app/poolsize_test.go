package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// A pool too small for the roles' holders (five projectors, two process
// managers of the router, the log's LISTEN connection) is refused with the
// least that works.
func TestCheckPoolSize(t *testing.T) {
	for _, c := range []struct {
		roles []string
		conns int
		ok    bool
	}{
		{[]string{"api", "projections", "workers"}, 4, false},
		{[]string{"api", "projections", "workers"}, 8, false},
		{[]string{"api", "projections", "workers"}, 9, true},
		{[]string{"api", "projections"}, 6, false},
		{[]string{"api", "projections"}, 7, true},
		{[]string{"projections"}, 7, true},
		{[]string{"workers"}, 3, false},
		{[]string{"workers"}, 4, true},
		{[]string{"api"}, 1, true},
	} {
		err := app.CheckPoolSize(config.Config{Roles: c.roles}, c.conns, 2)
		if (err == nil) != c.ok {
			t.Errorf("roles %v, %d connections: %v, want ok %v", c.roles, c.conns, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "pool_max_conns") {
			t.Errorf("the refusal does not say what to change: %v", err)
		}
	}
}

// A process whose pool is the least its roles accept keeps moving while
// every projector has work at once (sends arrive together, a worker process
// sends them and their webhooks are recorded): each send is answered 202
// and readable at once, and each email and webhook is projected.
func TestTheLeastPoolTheRolesAcceptKeepsThemMoving(t *testing.T) {
	roles := []string{"api", "projections"}
	least := 1
	for app.CheckPoolSize(config.Config{Roles: roles}, least, 0) != nil {
		least++
	}
	url := pgtest.NewURL(t)
	shared := t.TempDir()
	cfgOf := func(roles []string, url string) config.Config {
		cfg := apptest.Config(t, url)
		cfg.Roles, cfg.DataDir, cfg.BlobDir, cfg.SandboxOutbox = roles, shared, shared+"/blobs", shared+"/outbox"
		cfg.EgressAllowCIDRs, cfg.WebhookAllowHTTP = "127.0.0.0/8", true
		return cfg
	}
	s := apptest.StartWith(t, cfgOf(roles, url+fmt.Sprintf("&pool_max_conns=%d", least)))
	apptest.StartWith(t, cfgOf([]string{"workers"}, url))
	_, _, key := s.Sender("acme.test")
	var heard atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		heard.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	if r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": receiver.URL}); r.Status != 201 {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 8 {
				r := s.Do("POST", "/v1/emails/send", key, map[string]any{"from": "a@acme.test",
					"to": fmt.Sprintf("u%d-%d@example.org", c, i), "subject": "s", "text": "t"})
				if r.Status != 202 {
					t.Errorf("send with a pool of %d: %d %s", least, r.Status, r.Body)
					return
				}
				id := r.JSON(t)["id"].(string)
				if g := s.Do("GET", "/v1/emails/"+id, key, nil); g.Status != 200 {
					t.Errorf("the email just sent, with a pool of %d: %d %s", least, g.Status, g.Body)
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	sent := make(chan struct{})
	go func() { wg.Wait(); close(sent) }()
	select {
	case <-sent:
	case <-time.After(60 * time.Second):
		t.Fatalf("with a pool of %d, the sends were not answered within a minute: every connection held, none moves", least)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var delivered, listed int
		if err := s.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM emails WHERE id = ANY($1) AND status = 'delivered'),
			(SELECT count(*) FROM webhook_deliveries WHERE email_id = ANY($1) AND status = 'delivered')`, ids).Scan(&delivered, &listed); err != nil {
			t.Fatal(err)
		}
		if delivered == len(ids) && listed == 2*len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with a pool of %d: %d of %d emails delivered, %d of %d webhooks listed delivered (%d received)",
				least, delivered, len(ids), listed, 2*len(ids), heard.Load())
		}
	}
}

// Readiness tells a pool with every connection in use from PostgreSQL not
// answering.
func TestReadinessNamesAPoolWithNoConnectionFree(t *testing.T) {
	cfg := apptest.Config(t, pgtest.NewURL(t)+"&pool_max_conns=2")
	cfg.Roles = []string{"api"}
	s := apptest.StartWith(t, cfg)
	ctx := context.Background()
	for range 2 {
		c, err := s.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
	}
	time.Sleep(1100 * time.Millisecond) // past an answer shared from before
	_, err := s.App.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "all 2 connections of the pool are in use") {
		t.Fatalf("ready with no connection free: %v", err)
	}
}

// A check of the stores that runs out of time after PostgreSQL answered is
// named as slow, at the step it was at, not as a store unreachable.
func TestReadinessNamesACheckThatRanOutOfTime(t *testing.T) {
	cfg := apptest.Config(t, pgtest.NewURL(t))
	cfg.Roles = []string{"api"}
	s := apptest.StartWith(t, cfg)
	ctx := context.Background()
	// The lag count reads the checkpoints, which a lock taken elsewhere
	// holds up past the check's time.
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE projection_checkpoints IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past an answer shared from before
	_, err = s.App.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "counting the projections' lag did not finish within the readiness check's 2s, though PostgreSQL answered its ping") {
		t.Fatalf("ready with its lag count held up: %v", err)
	}
}
