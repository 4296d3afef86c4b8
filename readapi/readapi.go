// Package readapi is the query side: typed reads over the read models for
// the API and the commands. It never reads the event store.
package readapi

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/turns"
)

// Reader answers the API's queries from the read models.
type Reader struct {
	pool *pgxpool.Pool
	now  func() time.Time
	// recipientTrigrams is set once the emails' trigram index is found.
	recipientTrigrams atomic.Bool
	// lists are the turns of email lists: one at a time per account, and
	// at most half the pool's connections. A filtered list may cost tens
	// of milliseconds of the database, and an account listing from many
	// clients at once would otherwise take every core from the others.
	lists *turns.Turns
}

// New returns a Reader over pool; now is the clock that decides expiry.
func New(pool *pgxpool.Pool, now func() time.Time) *Reader {
	return &Reader{pool: pool, now: now, lists: turns.New(int(pool.Config().MaxConns) / 2)}
}

// Querier is what reads need of a pool or transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ErrNotFound is returned for a resource that does not exist or belongs to
// another account. It is a domain.ErrNotFound, so a command takes a lookup
// of the read models as it is.
var ErrNotFound = fmt.Errorf("%w", domain.ErrNotFound)

// NotFoundError is ErrNotFound naming the resource that was asked for.
type NotFoundError struct{ Resource string }

func (e *NotFoundError) Error() string { return "no such " + e.Resource }

// Unwrap makes a NotFoundError an ErrNotFound.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }
