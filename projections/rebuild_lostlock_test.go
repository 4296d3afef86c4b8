package projections_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/projections"
)

// A rebuild whose lock was lost must not drop the shadow tables of the
// rebuild that took the lock after it.
func TestALostRebuildLeavesTheNextOneAlone(t *testing.T) {
	pool, store, _ := thirtyTallied(t)
	a := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	b := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	bStarted, aDone, bErr := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	once := false
	errA := a.Rebuild(ctxA, tally{version: 1}, func(int64) {
		if once {
			return
		}
		once = true
		// A's lock session dies: the server releases its lock.
		key := int64(pglock.Rebuild("tally"))
		if _, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $1`, key); err != nil {
			t.Error(err)
		}
		go func() {
			first := true
			bErr <- b.Rebuild(context.Background(), tally{version: 1}, func(int64) {
				if first {
					first = false
					close(bStarted)
					<-aDone
				}
			})
		}()
		<-bStarted
		cancelA() // Hold would end A's work once it notices
	})
	close(aDone)
	if !errors.Is(errA, context.Canceled) {
		t.Logf("A: %v", errA)
	}
	if err := <-bErr; err != nil {
		t.Fatalf("the rebuild that took the lock after A failed: %v", err)
	}
}
