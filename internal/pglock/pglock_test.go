package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// TestKeysKeepTheirValues pins every lock id: processes of an older release
// running side by side take the same ones.
func TestKeysKeepTheirValues(t *testing.T) {
	for _, c := range []struct {
		name string
		got  pglock.Key
		want int64
	}{
		{"migrations", pglock.Migrations, 7261001},
		{"domain poll", pglock.DomainPoll, 7261002},
		{"webhook sweep", pglock.WebhookSweep, 7261003},
		{"ses feedback", pglock.SESFeedback, 7261004},
		{"retention", pglock.Retention, 7261005},
		{"process manager email-pipeline", pglock.ProcessManager("email-pipeline"), 2008873620028063588},
		{"process manager webhooks", pglock.ProcessManager("webhooks"), -8704130075819862885},
		{"projection accounts", pglock.Projection("accounts"), -300307550864010106},
		{"projection api_keys", pglock.Projection("api_keys"), -5411726805269966481},
		{"projection domains", pglock.Projection("domains"), -1547614041479709709},
		{"projection emails", pglock.Projection("emails"), -4589650954094787157},
		{"projection webhooks", pglock.Projection("webhooks"), -1557074857343720964},
		{"rebuild accounts", pglock.Rebuild("accounts"), 3953687162528920721},
		{"rebuild api_keys", pglock.Rebuild("api_keys"), 1385128298079032224},
		{"rebuild domains", pglock.Rebuild("domains"), 5172660843728846594},
		{"rebuild emails", pglock.Rebuild("emails"), -2566320350853794600},
		{"rebuild webhooks", pglock.Rebuild("webhooks"), 792730151204542787},
		{"river client", pglock.RiverClient("mailroom-0123456789abcdef"), 6804231273687833918},
		{"stream class", pglock.Key(pglock.StreamClass), 0x6d726576},
	} {
		if int64(c.got) != c.want {
			t.Errorf("%s: key %d, want %d", c.name, c.got, c.want)
		}
	}
}

func connConfig(t *testing.T) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// holding holds key in the background until the returned stop is called.
func holding(t *testing.T, cfg *pgx.ConnConfig, key pglock.Key) (pid uint32, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan uint32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pglock.Hold(ctx, cfg, key, pglock.Options{}, func(ctx context.Context, c *pglock.Conn) error {
			c.Do(func(conn *pgx.Conn) error {
				held <- conn.PgConn().PID()
				return nil
			})
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case pid = <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("lock not taken")
	}
	return pid, func() { cancel(); <-done }
}

func TestTryGivesUpWhileHeldElsewhere(t *testing.T) {
	cfg := connConfig(t)
	_, stop := holding(t, cfg, 42)
	ran := false
	err := pglock.Hold(context.Background(), cfg, 42, pglock.Options{Wait: pglock.Try}, func(context.Context, *pglock.Conn) error {
		ran = true
		return nil
	})
	if !errors.Is(err, pglock.ErrHeld) || ran {
		t.Fatalf("Try while held: err %v, ran %v", err, ran)
	}
	stop()
	if err := pglock.Hold(context.Background(), cfg, 42, pglock.Options{Wait: pglock.Try}, func(context.Context, *pglock.Conn) error {
		ran = true
		return nil
	}); err != nil || !ran {
		t.Fatalf("Try once free: err %v, ran %v", err, ran)
	}
}

func TestPollWaitsForTheHolderToLeave(t *testing.T) {
	cfg := connConfig(t)
	_, stop := holding(t, cfg, 43)
	standby := make(chan struct{})
	result := make(chan error)
	go func() {
		result <- pglock.Hold(context.Background(), cfg, 43, pglock.Options{Every: 20 * time.Millisecond, Standby: func() { close(standby) }},
			func(context.Context, *pglock.Conn) error { return nil })
	}()
	<-standby
	select {
	case err := <-result:
		t.Fatalf("ran while held elsewhere (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	stop()
	select {
	case err := <-result:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not take the freed lock")
	}
}

func TestLosingTheConnectionEndsTheTenure(t *testing.T) {
	cfg := connConfig(t)
	pids := make(chan uint32, 1)
	result := make(chan error)
	go func() {
		result <- pglock.Hold(context.Background(), cfg, 44, pglock.Options{Every: 20 * time.Millisecond}, func(ctx context.Context, c *pglock.Conn) error {
			c.Do(func(conn *pgx.Conn) error {
				pids <- conn.PgConn().PID()
				return nil
			})
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	pid := <-pids
	admin, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", int64(pid)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, pglock.ErrLost) {
			t.Fatalf("got %v, want ErrLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tenure went on without its connection")
	}
}

func stateOf(ts *pglock.Tenures, name string) pglock.Tenure {
	for _, v := range ts.List() {
		if v.Name == name {
			return v
		}
	}
	return pglock.Tenure{Name: name}
}

// eventually waits until ok holds of name's tenure.
func eventually(t *testing.T, ts *pglock.Tenures, name string, ok func(pglock.Tenure) bool) pglock.Tenure {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v := stateOf(ts, name)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v", name, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Hold records what each named holder is doing: the holder active, the
// one waiting for it on standby, one that cannot connect failing with its
// reason, and the holder whose connection is lost failing too.
func TestTenuresSayWhatEachHolderIsDoing(t *testing.T) {
	cfg := connConfig(t)
	ts := &pglock.Tenures{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pglock.Lead(ctx, cfg, 46, pglock.Options{Every: 20 * time.Millisecond, Name: "first", Tenures: ts},
		slog.New(slog.DiscardHandler), func(ctx context.Context) {
			<-ctx.Done()
		})
	eventually(t, ts, "first", func(v pglock.Tenure) bool { return v.State == pglock.Active })
	go pglock.Hold(ctx, cfg, 46, pglock.Options{Every: 20 * time.Millisecond, Name: "second", Tenures: ts},
		func(ctx context.Context, c *pglock.Conn) error {
			<-ctx.Done()
			return nil
		})
	eventually(t, ts, "second", func(v pglock.Tenure) bool { return v.State == pglock.Standby })

	down := cfg.Copy()
	down.Port = 9 // nothing listens
	for range 2 {
		pglock.Hold(ctx, down, 47, pglock.Options{Name: "third", Tenures: ts}, func(context.Context, *pglock.Conn) error {
			t.Error("ran without a connection")
			return nil
		})
	}
	v := stateOf(ts, "third")
	if v.State != pglock.Failing || v.Failures != 2 || v.Err == nil || !strings.Contains(v.Err.Error(), "lock connection") {
		t.Fatalf("holder that cannot connect: %+v", v)
	}

	// The first holder's connection goes: it fails, and the second takes over.
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var pid int64
	if err := admin.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND (classid::bigint << 32 | objid::bigint) = 46`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	v = eventually(t, ts, "first", func(v pglock.Tenure) bool { return v.State != pglock.Active })
	if v.State != pglock.Failing || !errors.Is(v.Err, pglock.ErrLost) {
		t.Fatalf("first after losing its connection: %+v", v)
	}
	eventually(t, ts, "second", func(v pglock.Tenure) bool { return v.State == pglock.Active })
	eventually(t, ts, "first", func(v pglock.Tenure) bool { return v.State == pglock.Standby })
}

// blackhole forwards connections to a PostgreSQL server until cut, after
// which it drops what either side sends and keeps both sockets open: a
// network partition as the server sees it, where its session lives on.
type blackhole struct {
	ln  net.Listener
	mu  sync.Mutex
	cur []*atomic.Bool // whether each connection is cut
}

func newBlackhole(t *testing.T, server string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			cut := &atomic.Bool{}
			b.mu.Lock()
			b.cur = append(b.cur, cut)
			b.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						dst.Close()
						return
					}
					if !cut.Load() {
						dst.Write(buf[:n])
					}
				}
			}
			go pipe(s, c)
			go pipe(c, s)
			t.Cleanup(func() { c.Close(); s.Close() })
		}
	}()
	return b
}

// cutOpen cuts the connections open now; later ones pass.
func (b *blackhole) cutOpen() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.cur {
		c.Store(true)
	}
}

// A holder that loses touch with its session while the server keeps it,
// and the lock with it, is not standing by for another process: it ends
// its own earlier session and takes the lock again, and says meanwhile
// that it is failing.
func TestAHolderEndsItsOwnSessionLeftAtTheServer(t *testing.T) {
	cfg := connConfig(t)
	b := newBlackhole(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	via := cfg.Copy()
	host, port, _ := net.SplitHostPort(b.ln.Addr().String())
	via.Host = host
	fmt.Sscan(port, &via.Port)

	ts := &pglock.Tenures{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pglock.Lead(ctx, via, 48, pglock.Options{Every: 100 * time.Millisecond, Name: "reader", Tenures: ts},
		slog.New(slog.DiscardHandler), func(ctx context.Context) { <-ctx.Done() })
	eventually(t, ts, "reader", func(v pglock.Tenure) bool { return v.State == pglock.Active })
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	holder := func() (pid int64) {
		admin.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND (classid::bigint << 32 | objid::bigint) = 48`).Scan(&pid)
		return pid
	}
	first := holder()

	b.cutOpen()
	v := eventually(t, ts, "reader", func(v pglock.Tenure) bool {
		return v.State == pglock.Failing && v.Err != nil && strings.Contains(v.Err.Error(), "earlier session")
	})
	if !strings.Contains(v.Err.Error(), fmt.Sprint(first)) {
		t.Errorf("failing for %v, which does not name the session %d", v.Err, first)
	}
	eventually(t, ts, "reader", func(v pglock.Tenure) bool { return v.State == pglock.Active })
	if now := holder(); now == first || now == 0 {
		t.Fatalf("lock held by %d, first by %d", now, first)
	}
}

// A holder ends a session holding its lock only when that session is the
// one it lost: the same server process id is not enough, since a pooler in
// session mode hands a server session to its next client (another
// process, whose lock it must not end), after releasing every advisory
// lock, the holder's mark too.
func TestOnlyTheSessionLeftBehindIsEnded(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewURL(t)
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	const key, mark = pglock.Key(49), int64(7261049)
	other, self := connect(), connect()
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(key)); err != nil {
		t.Fatal(err)
	}
	ts := &pglock.Tenures{}
	o := pglock.Options{Name: "reader", Tenures: ts}
	ts.LeaveForTest("reader", int64(other.PgConn().PID()), mark)

	if ended, err := pglock.EndLeftSession(ctx, self, key, o); ended {
		t.Fatalf("ended a session of the same process id without the mark: %v", err)
	}
	if err := other.Ping(ctx); err != nil {
		t.Fatalf("the other client's session: %v", err)
	}
	if ts.LeftForTest("reader") {
		t.Error("the lost session is still remembered after another was found holding the lock")
	}

	// The session that holds the mark is the one lost: it is ended.
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", mark); err != nil {
		t.Fatal(err)
	}
	ts.LeaveForTest("reader", int64(other.PgConn().PID()), mark)
	if ended, err := pglock.EndLeftSession(ctx, self, key, o); !ended || err == nil {
		t.Fatalf("left session not ended: %v %v", ended, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for other.Ping(ctx) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the left session lives on")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A holder whose work fails for a reason that passes (here the server
// refusing the role a second connection, SQLSTATE 53300) runs its work
// again still holding its lock on the same connection: given up, that
// connection's slot could go to another for good. The tenure says it is
// failing meanwhile. Any other error ends the tenure at once.
func TestPassingErrorsKeepTheLockAndItsConnection(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewURL(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("mailroom_test_lock_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN CONNECTION LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
		admin.Close(context.Background())
	})
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	tenures := &pglock.Tenures{}
	var runs int
	var pids []uint32
	o := pglock.Options{Name: "reader", Tenures: tenures, Passing: database.Unreachable, Every: 50 * time.Millisecond}
	err = pglock.Hold(ctx, cfg, pglock.Key(424242), o, func(ctx context.Context, c *pglock.Conn) error {
		runs++
		c.Do(func(conn *pgx.Conn) error {
			pids = append(pids, conn.PgConn().PID())
			return nil
		})
		if runs == 3 {
			if v := tenures.List()[0]; v.State != pglock.Failing || v.Failures != 2 || !strings.Contains(fmt.Sprint(v.Err), "53300") {
				t.Errorf("tenure while retrying: %+v", v)
			}
			return nil
		}
		// The work's own connection: the lock's holds the role's one slot.
		other, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			other.Close(ctx)
			return errors.New("the role got a second connection")
		}
		return err
	})
	if err != nil || runs != 3 {
		t.Fatalf("Hold = %v after %d runs, want nil after 3", err, runs)
	}
	for _, pid := range pids[1:] {
		if pid != pids[0] {
			t.Errorf("the work ran again on another lock connection: %v", pids)
		}
	}

	runs = 0
	bad := errors.New("a refused value")
	if err := pglock.Hold(ctx, cfg, pglock.Key(424242), o, func(context.Context, *pglock.Conn) error {
		runs++
		return bad
	}); !errors.Is(err, bad) || runs != 1 {
		t.Errorf("Hold = %v after %d runs, want the error after 1", err, runs)
	}
}
