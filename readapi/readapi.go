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
)

// Reader answers the API's queries from the read models.
type Reader struct {
	pool *pgxpool.Pool
	now  func() time.Time
	// recipientTrigrams is set once the emails' trigram index is found.
	recipientTrigrams atomic.Bool
}

// New returns a Reader over pool; now is the clock that decides expiry.
func New(pool *pgxpool.Pool, now func() time.Time) *Reader {
	return &Reader{pool: pool, now: now}
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
