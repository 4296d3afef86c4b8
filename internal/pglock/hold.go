package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wait says what Hold does while another session holds the lock.
//
// No session waits for a session lock (migrations, rebuilds, leadership)
// inside a statement: a waiting statement holds a snapshot, and CREATE
// INDEX CONCURRENTLY waits for every snapshot older than it in the
// database. Had a process that holds a lock built an index so while
// another process waited for that lock in a statement, each would wait for
// the other for good, across two processes where PostgreSQL's deadlock
// detection cannot see it. Transaction locks are still waited for in
// statements; their holders are short and never wait for an index build.
type Wait int

const (
	// Poll tries the lock again every Options.Every until it is free.
	Poll Wait = iota
	// Try gives up at once, with ErrHeld.
	Try
)

var (
	// ErrHeld means another session holds the lock (Try only).
	ErrHeld = errors.New("advisory lock held by another session")
	// ErrLost means the lock's connection failed while it was held, so
	// the lock may be gone.
	ErrLost = errors.New("advisory lock connection failed")
)

// Options tune Hold.
type Options struct {
	Wait Wait
	// Every is how often Poll tries the lock again, and how often the
	// connection of a held lock is checked; one second when zero.
	Every time.Duration
	// Standby, when set, is called the first time Poll finds the lock
	// held elsewhere.
	Standby func()
	// Name, with Tenures, records how this holder is doing under Name:
	// for the long-lived holders that readiness and metrics show.
	Name    string
	Tenures *Tenures
	// Passing, when set, tells the errors of f that pass by themselves
	// (the process's pool refused a connection for want of slots at the
	// server, a statement timed out). Hold then runs f again after a
	// growing backoff, still holding its lock on its own connection,
	// rather than ending the tenure: given up, that connection's slot
	// could go to another connection for good, and a holder that cannot
	// connect again stops the work it leads. Retrying, when set, hears of
	// each retry; f's recovery is the holder's to record (Tenures.Working).
	Passing  func(error) bool
	Retrying func(err error, in time.Duration)
}

// How long Hold waits before it runs f again after a passing error: from
// passingMin, doubling to passingMax; back to passingMin once f ran
// steadyAfter.
const (
	passingMin = 100 * time.Millisecond
	passingMax = 10 * time.Second
)

// record notes a holder's state when o names one.
func (o Options) record(state State, err error) {
	o.Tenures.set(o.Name, state, time.Now(), err)
}

// statementTimeout bounds each statement of Hold's own. A check that
// times out counts as a lost connection.
const statementTimeout = 5 * time.Second

// Conn is the connection holding a lock. Its statements take turns with
// the lock's checks.
type Conn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

// Do runs f on the connection.
func (c *Conn) Do(f func(conn *pgx.Conn) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f(c.conn)
}

func (c *Conn) ping() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Not bound to the tenure: a check cut short would close the
	// connection a holder may still use to finish.
	ctx, cancel := context.WithTimeout(context.Background(), statementTimeout)
	defer cancel()
	return c.conn.Ping(ctx)
}

// Hold takes key on a connection of its own, opened from cfg, waiting as
// o.Wait says, and runs f while it holds it. f's context ends when ctx does
// or, with a cause wrapping ErrLost, when the connection fails a check.
// At the end the lock is released, then the connection closed.
//
// Hold returns f's error; or, when the connection was lost and f reports
// nothing else, that cause; or why it never held the lock (ErrHeld, a
// connection failure, ctx's error).
func Hold(ctx context.Context, cfg *pgx.ConnConfig, key Key, o Options, f func(ctx context.Context, conn *Conn) error) error {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	pc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		err = fmt.Errorf("lock connection: %w", err)
		if ctx.Err() == nil {
			o.record(Failing, err)
		}
		return err
	}
	held := false
	var self *session // this tenure's session at the server, for a named holder
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), statementTimeout)
		defer cancel()
		if held {
			// The server drops a closed session's locks in its own time:
			// unlocked here, the lock is free for the next holder once
			// Hold returns.
			if _, err := pc.Exec(cctx, "SELECT pg_advisory_unlock($1)", int64(key)); err != nil && self != nil {
				// Out of touch: the server may keep the session, and the
				// lock, until it finds the connection dead.
				o.Tenures.leave(o.Name, self)
			}
		}
		pc.Close(cctx)
	}()
	if err := acquire(ctx, pc, key, o); err != nil {
		if ctx.Err() == nil && err != ErrHeld {
			o.record(Failing, err)
		}
		return err
	}
	held = true
	if o.Tenures != nil && o.Name != "" {
		o.Tenures.leave(o.Name, nil) // whatever was left has let go
		self = markSession(ctx, pc)  // nil: it cannot be recognised later
	}
	o.record(Active, nil)
	conn := &Conn{conn: pc}
	lctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// The checks also keep an idle_session_timeout from dropping the lock.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch(lctx, conn, o.Every, stop)
	}()
	err = f(lctx, conn)
	for wait := passingMin; o.passing(lctx, err); {
		o.record(Failing, err)
		if o.Retrying != nil {
			o.Retrying(err, wait)
		}
		if !sleep(lctx, wait) {
			err = context.Cause(lctx)
			break
		}
		began := time.Now()
		err = f(lctx, conn)
		if time.Since(began) >= steadyAfter {
			wait = passingMin
		} else {
			wait = min(2*wait, passingMax)
		}
	}
	stop(nil)
	<-watched
	if cause := context.Cause(lctx); errors.Is(cause, ErrLost) && (err == nil || errors.Is(err, context.Canceled)) {
		err = cause
	}
	if err != nil && ctx.Err() == nil {
		o.record(Failing, err)
	}
	return err
}

// passing reports whether Hold runs f again after err: a passing error
// while the tenure lasts. A lost connection is not one: the lock may be
// gone with it.
func (o Options) passing(tenure context.Context, err error) bool {
	return err != nil && tenure.Err() == nil && o.Passing != nil && !errors.Is(err, ErrLost) && o.Passing(err)
}

// acquire takes key on conn as o.Wait says.
func acquire(ctx context.Context, conn *pgx.Conn, key Key, o Options) error {
	standby := false
	for {
		var ok bool
		qctx, cancel := context.WithTimeout(ctx, statementTimeout)
		err := conn.QueryRow(qctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&ok)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("advisory lock: %w", err)
		}
		if ok {
			return nil
		}
		if o.Wait == Try {
			o.record(Standby, nil)
			return ErrHeld
		}
		if ended, err := endLeftSession(ctx, conn, key, o); ended {
			// Not another process: this one's own earlier session.
			o.record(Failing, err)
			if !sleep(ctx, o.Every) {
				return ctx.Err()
			}
			continue
		}
		if !standby {
			o.record(Standby, nil)
			if o.Standby != nil {
				o.Standby()
			}
		}
		standby = true
		if !sleep(ctx, o.Every) {
			return ctx.Err()
		}
	}
}

// session is a tenure's session at the server, known by its process id
// and by a lock of its own: the id alone is not enough, as a pooler in
// session mode hands the same server session to its next client (after
// DISCARD ALL, which releases every advisory lock, the mark too).
type session struct {
	pid  int64
	mark int64 // an advisory lock only this session holds
}

// markSession takes a lock of a random key on conn and returns the
// session so marked, or nil.
func markSession(ctx context.Context, conn *pgx.Conn) *session {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	s := &session{mark: rand.Int64()}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid(), pg_try_advisory_lock($1)`, s.mark).Scan(&s.pid, &ok); err != nil || !ok {
		return nil
	}
	return s
}

// endLeftSession handles a lock found held by a named holder that lost
// touch with its previous session. When that session still holds the lock
// (the server has not yet found its connection dead: until its TCP
// keepalives give up, two hours by default), the holder is not standing
// by for another process but kept from its work by itself: it ends that
// session, whose work stopped with the tenure, and reports true with why
// it cannot take the lock yet. When another session holds the lock, it
// forgets its own.
func endLeftSession(ctx context.Context, conn *pgx.Conn, key Key, o Options) (bool, error) {
	left := o.Tenures.left(o.Name)
	if left == nil {
		return false, nil
	}
	qctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	var pid int64
	err := conn.QueryRow(qctx, `SELECT l.pid FROM pg_locks l JOIN pg_locks m ON m.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND (l.classid::bigint << 32 | l.objid::bigint) = $1
		AND m.locktype = 'advisory' AND m.granted AND m.objsubid = 1 AND (m.classid::bigint << 32 | m.objid::bigint) = $2`,
		int64(key), left.mark).Scan(&pid)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || err == nil && pid != left.pid:
		o.Tenures.leave(o.Name, nil)
		return false, nil
	case err != nil:
		return false, nil // asked again at the next try
	}
	if _, err := conn.Exec(qctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		return true, fmt.Errorf("the lock is held by this process's earlier session (server pid %d), which it lost touch with, and ending it failed: %w", pid, err)
	}
	return true, fmt.Errorf("the lock is held by this process's earlier session (server pid %d), which it lost touch with; that session is being ended", pid)
}

// watch checks conn every so often until ctx ends, and ends the tenure
// when a check fails: losing the connection loses the lock.
func watch(ctx context.Context, conn *Conn, every time.Duration, stop context.CancelCauseFunc) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := conn.ping(); err != nil {
			if ctx.Err() == nil {
				stop(fmt.Errorf("%w: %w", ErrLost, err))
			}
			return
		}
	}
}

// Lead runs run whenever this process holds key, until ctx ends: it waits
// for the lock, runs run while it holds it, and after losing it waits a
// second and waits for it again. o.Name names the worker in logs and, with
// o.Tenures, in its record.
func Lead(ctx context.Context, cfg *pgx.ConnConfig, key Key, o Options, log *slog.Logger, run func(ctx context.Context)) {
	for {
		err := Hold(ctx, cfg, key, o, func(ctx context.Context, _ *Conn) error {
			run(ctx)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			log.Warn("exclusive worker", "worker", o.Name, "err", err)
		}
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
