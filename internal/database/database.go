// Package database opens Mailroom's PostgreSQL database, creating it when it
// is missing, and applies the schema migrations that the event store, the
// projection engine and the job queue (River's own, see package jobs) need.
// Read-model tables belong to their projectors (see package projections) so
// that they can be rebuilt into shadow tables.
package database

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/mailroom/mailroom/internal/connstr"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pglock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultConns is the pool size of a process that does not send: the API's
// queries, and projectors holding a transaction while they read events on
// a second connection.
const DefaultConns = 24

// Open connects to url, creating the database first if it does not exist.
// The pool holds DefaultConns connections unless url sets pool_max_conns.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return OpenSized(ctx, url, DefaultConns)
}

// OpenSized is Open with a pool of conns connections unless url sets
// pool_max_conns.
func OpenSized(ctx context.Context, url string, conns int) (*pgxpool.Pool, error) {
	if err := EnsureExists(ctx, url); err != nil {
		return nil, err
	}
	cfg, err := parse(url)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(conns, 1))
	}
	// Dates are UTC dates everywhere in Mailroom, whatever the server's
	// zone: a date taken from a timestamp in SQL is too.
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

// Exists reports whether the database named in url exists.
func Exists(ctx context.Context, url string) (bool, error) {
	pcfg, err := parse(url)
	if err != nil {
		return false, err
	}
	conn, err := pgx.ConnectConfig(ctx, pcfg.ConnConfig)
	if err == nil {
		return true, conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		return false, nil
	}
	return false, fmt.Errorf("database: %w", err)
}

// EnsureExists creates the database named in url when it is missing, by
// connecting to the server's "postgres" database.
func EnsureExists(ctx context.Context, url string) error {
	pcfg, err := parse(url)
	if err != nil {
		return err
	}
	cfg := pcfg.ConnConfig
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("database: %w", err)
	}
	name := cfg.Database
	admin := cfg.Copy()
	admin.Database = "postgres"
	aconn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("database: connect to create %q: %w", name, err)
	}
	defer aconn.Close(ctx)
	_, err = aconn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	switch {
	case isDuplicateDatabase(err):
		return nil // created by another process meanwhile
	case err != nil:
		return fmt.Errorf("database: create %q: %w", name, err)
	}
	slog.Info("created database", "database", name)
	return nil
}

// ConnectTimeout bounds each new connection, lock connections included,
// unless the URL sets connect_timeout (or PGCONNECT_TIMEOUT is set): after
// a failover, an address that now drops packets would otherwise hold a
// connection attempt for the two minutes the system takes to give up.
const ConnectTimeout = 10 * time.Second

// parse reads url as a pool URL, so pool settings (pool_max_conns, …)
// are taken out rather than sent to the server.
func parse(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", urlError(err))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 && !strings.Contains(url, "connect_timeout") {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	return cfg, nil
}

// urlError reports a connection string that did not parse without quoting
// it, as it may carry a password (pgx masks it only on a best-effort basis).
func urlError(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) || pe.Unwrap() == nil {
		return errors.New("not a valid PostgreSQL connection string")
	}
	inner := pe.Unwrap()
	var ue *neturl.Error // quotes the whole URL
	if errors.As(inner, &ue) {
		inner = ue.Err
	}
	return fmt.Errorf("not a valid PostgreSQL connection string: %v", inner)
}

// CheckURL reports whether url is a connection string Open can use,
// without connecting.
func CheckURL(url string) error {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		// pgx reads a "?" or "#" in a password itself, but a "/" ends the
		// host part: the password's rest becomes the database name, which
		// connection errors quote.
		path, _, _ := strings.Cut(url, "?")
		if connstr.MisplacedCredentials(path, "/") {
			return connstr.ErrMisplacedCredentials
		}
	}
	if _, err := pgxpool.ParseConfig(url); err != nil {
		return urlError(err)
	}
	return nil
}

func isDuplicateDatabase(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	// duplicate_database when it existed before; two creating it at once
	// meet on the catalog's unique index instead, and the later one is
	// told unique_violation.
	return pgErr.Code == "42P04" || (pgErr.Code == "23505" && pgErr.ConstraintName == "pg_database_datname_index")
}

// ErrNewerRelease means the database was migrated by a release newer than
// this one, which must not run against it.
var ErrNewerRelease = errors.New("database migrated by a newer release")

// Migrate applies every pending migration. Concurrent callers are
// serialised by a session advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return migrate(ctx, db, pool)
}

func migrate(ctx context.Context, db *sql.DB, pool *pgxpool.Pool) error {
	return pglock.Hold(ctx, pool.Config().ConnConfig, pglock.Migrations, pglock.Options{},
		func(ctx context.Context, _ *pglock.Conn) error { return up(ctx, db, pool) })
}

// up applies the pending migrations; the caller holds the migration lock.
func up(ctx context.Context, db *sql.DB, pool *pgxpool.Pool) error {
	provider, err := goose.NewProvider(goose.DialectPostgres, db, mustSub(migrations, "migrations"))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	current, known, err := provider.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if current > known {
		// An older binary on a newer schema would read events and tables
		// whose shape it does not know, and could undo what the newer
		// release did (erased emails reappear in rebuilt read models).
		return fmt.Errorf("%w: the database is at migration %d, this release knows migrations up to %d; run the newer release", ErrNewerRelease, current, known)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	for _, r := range results {
		slog.Info("applied migration", "source", r.Source.Path, "duration", r.Duration)
	}
	// The job queue's tables are River's, migrated by River's own migrator
	// so they always match the River this build links.
	if err := jobs.Migrate(ctx, pool); err != nil {
		return err
	}
	ensureTrigrams(ctx, pool)
	return nil
}

// ensureTrigrams creates the pg_trgm extension, whose index serves the
// email list's to filter (see projections.Emails), under the migration
// lock: concurrent CREATE EXTENSIONs would collide. It is trusted from
// PostgreSQL 13, so a role that may create objects in the database may
// create it. Mailroom runs without it, the filter reading every email of
// the account instead: a server without contrib, or a role without the
// privilege, is a warning, not a failure.
func ensureTrigrams(ctx context.Context, pool *pgxpool.Pool) {
	var have bool
	err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')").Scan(&have)
	if err == nil && !have {
		_, err = pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_trgm")
	}
	if err != nil {
		slog.Warn("the pg_trgm extension could not be created, so no index serves the email list's to filter: "+
			"it reads every email of the account. Install PostgreSQL's contrib extensions, or run CREATE EXTENSION pg_trgm "+
			"as a role that may, then restart", "err", err)
	}
}
