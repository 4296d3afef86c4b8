package processmanagers

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/pglock"
)

// timedPass runs pass under key's advisory lock, unless another instance
// holds it. With every > 0 (a timer's tick), it also skips the pass when
// one began within every, by whichever instance: each worker instance
// ticks on its own timer, out of phase with the others, and the lock alone
// would let each run a pass per interval. The pass's start is kept in the
// table timed_passes under name. ran reports that this call ran the pass.
func timedPass(ctx context.Context, pool *pgxpool.Pool, key pglock.Key, name string, now time.Time, every time.Duration,
	pass func(ctx context.Context) error) (ran bool, err error) {
	err = pglock.Hold(ctx, pool.Config().ConnConfig, key, pglock.Options{Wait: pglock.Try},
		func(ctx context.Context, conn *pglock.Conn) error {
			due, err := beginPass(ctx, conn, name, now, every)
			if err != nil || !due {
				return err
			}
			ran = true
			return pass(ctx)
		})
	if errors.Is(err, pglock.ErrHeld) {
		return false, nil
	}
	return ran, err
}

// beginPass records now as the start of name's pass and reports true,
// unless every > 0 and the last one began less than every ago, give or
// take passSlack. The caller holds the pass's lock, so no other instance
// reads or writes the row meanwhile. A start later than every after now
// is a clock that went back (or one set wrong once): it does not hold
// passes up.
func beginPass(ctx context.Context, conn *pglock.Conn, name string, now time.Time, every time.Duration) (bool, error) {
	var n int64
	err := conn.Do(func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `INSERT INTO timed_passes AS t (name, began_at) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET began_at = excluded.began_at
			WHERE $3 OR t.began_at <= $4 OR t.began_at > $5`,
			name, now, every <= 0, now.Add(-(every - every/passSlack)), now.Add(every))
		n = tag.RowsAffected()
		return err
	})
	return n == 1, err
}

// passSlack: a tick finds the pass due once nine tenths of the interval
// have gone since the last began. An instance's next tick comes an
// interval after its last, which may be a little less than an interval
// after the start it recorded (taken once it held the lock): without the
// slack, one instance alone would skip every other tick.
const passSlack = 10
