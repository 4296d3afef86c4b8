package app

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/projections"
)

// settle waits for the named read models to show pos, as every service of
// the app does after a write. One that does not catch up in time is logged
// and counted here; the error still reaches the caller, which decides what
// the write's answer is.
func (a *App) settle(ctx context.Context, pos eventstore.Position, names ...projections.Name) error {
	err := a.Waiter.WaitFor(ctx, pos, names...)
	var lag *projections.LagError
	if errors.As(err, &lag) {
		for _, n := range lag.Behind {
			// The request's id ties the line to the 503 the client got.
			a.Log.Warn("read model did not show a write in time", "projector", n, "timeout", lag.Timeout,
				"request_id", httpserver.RequestIDFrom(ctx))
			if a.readModelLate != nil {
				a.readModelLate(n)
			}
		}
	}
	return err
}

// newLateCounter counts the waits for a read model that ran out of time.
func newLateCounter(reg prometheus.Registerer) func(projections.Name) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailroom_read_model_wait_timeouts_total",
		Help: "Waits for a read model to show a write that ran out of time, by projector."}, []string{"projector"})
	reg.MustRegister(c)
	// Every series exists from the start, so an alert on it sees 0, not nothing.
	for _, n := range projections.Names {
		c.WithLabelValues(string(n))
	}
	return func(n projections.Name) { c.WithLabelValues(string(n)).Inc() }
}
