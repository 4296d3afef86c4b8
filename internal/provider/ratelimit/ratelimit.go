// Package ratelimit keeps the provider's maximum send rate across every
// worker process: a token bucket in PostgreSQL (table
// provider_rate_buckets) that refills at the rate, up to one second's
// worth, from which each process takes tokens in small batches. A token
// is one recipient, as SES counts its maximum send rate: a message to
// ten recipients takes ten.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limiter hands out this process's permissions to send.
type Limiter struct {
	pool *pgxpool.Pool
	name string
	rate float64 // recipients a second, > 0

	// turn is held by the one sender of the process drawing from the
	// bucket or waiting for it to refill; the others wait for it, each
	// until its own context ends (a mutex could not be given up).
	turn  chan struct{}
	stash int // tokens taken from the bucket and not yet used; under turn
}

// New returns a limiter of rate recipients a second on the bucket name.
func New(pool *pgxpool.Pool, name string, rate float64) *Limiter {
	return &Limiter{pool: pool, name: name, rate: rate, turn: make(chan struct{}, 1)}
}

// batch is how many tokens a process takes at once: a tenth of a second's
// worth, so the bucket is asked about ten times a second at most per
// process and no process sits on more than it uses right away.
func (l *Limiter) batch() int { return max(1, int(l.rate/10)) }

// capacity is the bucket's size: one second's worth.
func (l *Limiter) capacity() float64 { return max(1, l.rate) }

// Wait blocks until this process may send one message to recipients
// recipients (at least one token), or ctx ends, also while another sender
// of the process waits for its tokens. A message to more recipients than
// a batch takes them all at once, as soon as the bucket holds a whole
// token, and leaves it owing the rest: the refill pays that back before
// anyone draws again. Gathering them instead held the process's turn for
// as long as they took to refill (50 s for 50 recipients at one a second),
// could outlast the send job, and left what it had gathered to be spent
// later on top of a full bucket.
func (l *Limiter) Wait(ctx context.Context, recipients int) error {
	need := max(recipients, 1)
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.turn }()
	for l.stash < need {
		got, avail, err := l.take(ctx, max(l.batch(), need-l.stash), need-l.stash > l.batch())
		if err != nil {
			return err
		}
		if got > 0 {
			l.stash += got
			continue
		}
		// Until a whole token has refilled.
		wait := time.Duration((1 - avail) / l.rate * float64(time.Second))
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	l.stash -= need
	return nil
}

// take draws up to want whole tokens from the bucket after refilling it for
// the time since it was last drawn from; it returns how many it got and the
// tokens the bucket held before. With owe, it draws all of want once the
// bucket holds a whole token, leaving it below zero.
func (l *Limiter) take(ctx context.Context, want int, owe bool) (int, float64, error) {
	var got int
	var avail float64
	err := l.pool.QueryRow(ctx, `
		WITH seed AS (
			INSERT INTO provider_rate_buckets (name, tokens) VALUES ($1, $2)
			ON CONFLICT (name) DO NOTHING
		), cur AS (
			SELECT LEAST($2, tokens + $3 * EXTRACT(EPOCH FROM clock_timestamp() - updated_at)::float8) AS avail
			FROM provider_rate_buckets WHERE name = $1 FOR UPDATE
		), drawn AS (
			SELECT avail, CASE WHEN $5 AND avail >= 1 THEN $4 ELSE LEAST(floor(avail), $4) END AS n FROM cur
		)
		UPDATE provider_rate_buckets b
		SET tokens = drawn.avail - drawn.n, updated_at = clock_timestamp()
		FROM drawn WHERE b.name = $1
		RETURNING drawn.n::int, drawn.avail`,
		l.name, l.capacity(), l.rate, want, owe).Scan(&got, &avail)
	if errors.Is(err, pgx.ErrNoRows) {
		// The statement created the bucket, which its own snapshot cannot
		// see yet: the next draw finds it full.
		return l.take(ctx, want, owe)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("provider rate limit: %w", err)
	}
	if math.IsNaN(avail) {
		avail = 0
	}
	return got, avail, nil
}
