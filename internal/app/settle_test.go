package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// TestLateReadModelIsLoggedAndCounted: a write whose read model does not
// catch up in time reaches the caller as a *projections.LagError, and is
// logged at warn level and counted under the projector's name.
func TestLateReadModelIsLoggedAndCounted(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	a := &App{
		Waiter:        projections.NewWaiter(pgtest.NewPool(t), 50*time.Millisecond),
		Log:           slog.New(slog.NewTextHandler(&logs, nil)),
		readModelLate: newLateCounter(reg),
	}
	err := a.settle(context.Background(), eventstore.Position{Commit: 1 << 40}, projections.EmailsName)
	var lag *projections.LagError
	if !errors.As(err, &lag) || len(lag.Behind) != 1 || lag.Behind[0] != projections.EmailsName {
		t.Fatalf("settle past every checkpoint: %v", err)
	}
	if line := logs.String(); !strings.Contains(line, "level=WARN") || !strings.Contains(line, "projector=emails") {
		t.Fatalf("log: %q", line)
	}
	want := `# HELP mailroom_read_model_wait_timeouts_total Waits for a read model to show a write that ran out of time, by projector.
# TYPE mailroom_read_model_wait_timeouts_total counter
mailroom_read_model_wait_timeouts_total{projector="accounts"} 0
mailroom_read_model_wait_timeouts_total{projector="api_keys"} 0
mailroom_read_model_wait_timeouts_total{projector="domains"} 0
mailroom_read_model_wait_timeouts_total{projector="emails"} 1
mailroom_read_model_wait_timeouts_total{projector="webhooks"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mailroom_read_model_wait_timeouts_total"); err != nil {
		t.Fatal(err)
	}
}
