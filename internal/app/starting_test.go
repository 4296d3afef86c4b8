package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// A process whose start is held, here an api process waiting for a
// projections process of its release to rebuild a read model, answers its
// liveness probe at once and its readiness probe with 503 saying what it
// waits for: a start that takes long (a rebuild of a large log) must not
// get the process restarted by its liveness probe, and so never finish.
func TestAProcessWaitingForARebuildIsAliveAndNotReady(t *testing.T) {
	url := pgtest.NewURL(t)
	cfg := apptest.Config(t, url)
	noWorkers(&cfg)
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	first, err := app.Open(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	// As if this release had raised the emails projection's version and no
	// projections process of it had run yet.
	if _, err := first.Pool.Exec(ctx, "UPDATE projection_checkpoints SET schema_version = schema_version - 1 WHERE name = $1",
		string(projections.EmailsName)); err != nil {
		t.Fatal(err)
	}
	first.Close()

	cfg.Roles = []string{"api"}
	cfg.HTTPAddr, cfg.OpsAddr = freeAddr(t), freeAddr(t)
	ls, err := app.Listen(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	opening, stop := context.WithCancel(ctx)
	opened := make(chan error, 1)
	go func() {
		a, err := app.OpenOn(opening, cfg, log, ls)
		if err == nil {
			a.Close()
		}
		opened <- err
	}()
	t.Cleanup(func() {
		stop()
		<-opened
		ls.Close()
	})

	public, ops := "http://"+cfg.HTTPAddr, "http://"+cfg.OpsAddr
	eventually(t, "operator /readyz says it waits for a rebuild", func() (bool, string) {
		code, body := apptest.Probe(ops + "/readyz")
		return code == 503 && strings.Contains(body, "waiting for a projections process of this release to rebuild"), body
	})
	for _, base := range []string{public, ops} {
		if code, body := apptest.Probe(base + "/healthz"); code != 200 || !strings.Contains(body, "starting") {
			t.Errorf("%s/healthz while waiting: %d %s", base, code, body)
		}
	}
	if code, body := apptest.Probe(public + "/readyz"); code != 503 || strings.Contains(body, "rebuild") {
		t.Errorf("public /readyz while waiting: %d %s, want a 503 without detail", code, body)
	}
	// Scrapes go on: a target that failed them for as long as a start
	// takes would page as down. What the start has opened is measured.
	if code, body := apptest.Probe(ops + "/metrics"); code != 200 || !strings.Contains(body, "\nmailroom_starting 1\n") ||
		!strings.Contains(body, "\ngo_goroutines ") || !strings.Contains(body, `mailroom_projection_lag_events{projection="emails"}`) {
		t.Errorf("operator /metrics while waiting: %d %s", code, body)
	}
	if code, _ := apptest.Probe(public + "/metrics"); code == 200 {
		t.Errorf("public /metrics while waiting: %d, want it on the operator listener only", code)
	}
	if resp, err := http.Get(public + "/v1/emails"); err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "5" {
		t.Errorf("an API route while starting: %v %v, want 503 with Retry-After: 5", resp, err)
	} else {
		resp.Body.Close()
	}
	select {
	case err := <-opened:
		t.Fatalf("the start did not wait for the rebuild: %v", err)
	default:
	}
}
