package app_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/processmanagers"
)

// ownedByARole returns a fresh database owned by a role of its own, so
// that the test can limit that role's connections, and an admin
// connection to the server. Both go when t ends.
func ownedByARole(t *testing.T) (databaseURL, role string, admin *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	role = "mailroom_test_role_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
		admin.Close(context.Background())
	})
	databaseURL = pgtest.NewURL(t) // dropped before the role
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+strings.TrimPrefix(u.Path, "/")+" OWNER TO "+role); err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String(), role, admin
}

// When PostgreSQL refuses a worker's log reader its lock connection (no
// connection slot left) while the process's pool still has its own, the
// process sends nothing though its API and pool answer. Readiness and
// /metrics say so, and both clear once the reader is back.
func TestAWorkerThatCannotOpenItsLockConnectionIsNotReady(t *testing.T) {
	databaseURL, role, admin := ownedByARole(t)
	s := apptest.Start(t, func(c *config.Config) { c.DatabaseURL = databaseURL })
	ctx := context.Background()
	reader := processmanagers.EmailReaderName
	n := settledConnections(t, s, databaseURL, admin, role)

	// Every connection the role has now is all it may have; the reader's
	// lock connection goes.
	if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" CONNECTION LIMIT "+strconv.Itoa(n-1)); err != nil {
		t.Fatal(err)
	}
	key := int64(pglock.ProcessManager(reader))
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND (classid::bigint << 32 | objid::bigint) = $1`, key); err != nil {
		t.Fatal(err)
	}
	var why string
	eventually(t, "not ready", func() (bool, string) {
		_, err := s.App.Ready(ctx)
		why = fmt.Sprint(err)
		return strings.Contains(why, "worker "+reader+" is failing since"), why
	})
	for _, want := range []string{"no connection slot left (SQLSTATE 53300", "attempts)"} {
		if !strings.Contains(why, want) {
			t.Errorf("readiness %q does not say %q", why, want)
		}
	}
	if strings.Contains(why, role) {
		t.Errorf("readiness %q names the database role", why)
	}
	if m := string(s.Do("GET", "/metrics", "", nil).Body); !strings.Contains(m, `mailroom_worker_state{state="failing",worker="`+reader+`"} 1`) {
		t.Errorf("/metrics does not show %s failing:\n%s", reader, grepLines(m, "mailroom_worker_state"))
	}

	if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" CONNECTION LIMIT -1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ready again", func() (bool, string) {
		_, err := s.App.Ready(ctx)
		return err == nil && tenure(s, reader).State == pglock.Active, fmt.Sprint(err)
	})
	if m := string(s.Do("GET", "/metrics", "", nil).Body); !strings.Contains(m, `mailroom_worker_state{state="active",worker="`+reader+`"} 1`) {
		t.Errorf("/metrics does not show %s active again:\n%s", reader, grepLines(m, "mailroom_worker_state"))
	}
}

// settledConnections waits for the process to have started everything
// that holds a connection (every reader and lock active, the job queue
// started and led) and for role's connections to stay the same for a
// second, then returns their number: connections opened and closed while
// it starts would leave a slot free once the limit is set.
func settledConnections(t *testing.T, s *apptest.Server, databaseURL string, admin *pgx.Conn, role string) int {
	t.Helper()
	ctx := context.Background()
	// The job queue's tables, read as the server's user, not the role.
	server, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	db, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	server.Path = db.Path
	queue, err := pgx.Connect(ctx, server.String())
	if err != nil {
		t.Fatal(err)
	}
	defer queue.Close(ctx)
	eventually(t, "every reader and lock active, the job queue started", func() (bool, string) {
		for _, v := range s.App.Tenures.List() {
			if v.State != pglock.Active && v.State != pglock.Standby {
				return false, v.Name + " " + string(v.State)
			}
		}
		if v := tenure(s, processmanagers.EmailReaderName); v.State != pglock.Active {
			return false, "email reader " + string(v.State)
		}
		var queues, leaders int
		if err := queue.QueryRow(ctx, `SELECT (SELECT count(*) FROM river_queue), (SELECT count(*) FROM river_leader)`).Scan(&queues, &leaders); err != nil {
			return false, err.Error()
		}
		return queues >= 2 && leaders == 1, fmt.Sprintf("%d job queues, %d leaders", queues, leaders)
	})
	count := func() int {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n, since := count(), time.Now()
	eventually(t, "the role's connections steady for a second", func() (bool, string) {
		if m := count(); m != n {
			n, since = m, time.Now()
		}
		return time.Since(since) >= time.Second, fmt.Sprint(n, " connections")
	})
	return n
}

func tenure(s *apptest.Server, name string) pglock.Tenure {
	for _, v := range s.App.Tenures.List() {
		if v.Name == name {
			return v
		}
	}
	return pglock.Tenure{Name: name}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
