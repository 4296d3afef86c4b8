// Package app assembles Mailroom from its parts: database, event store,
// projections, commands, the HTTP API and its server. The binary and
// the end-to-end tests build the same App.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"golang.org/x/sync/errgroup"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/esdb"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/eventstore/sealed"
	"github.com/mailroom/mailroom/internal/httpapi"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/outcomes"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/scan"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// App is a running Mailroom's parts.
type App struct {
	Config        config.Config
	Log           *slog.Logger
	Pool          *pgxpool.Pool
	Store         eventstore.Store // personal data opened on the way out, sealed on the way in
	Ledger        eventstore.Store // the log byte for byte as recorded, personal data sealed: for auditing, and for readers of clear fields only
	Keys          *datakeys.Keyring
	AddressKeys   datakeys.AddressKeys
	Runner        *projections.Runner
	Waiter        *projections.Waiter
	Commands      *commands.Service
	Metrics       *httpserver.Metrics
	Box           *secretbox.Box
	DNS           commands.DNSChecker
	Identities    provider.Identities
	Outcomes      *outcomes.Recorder
	Tenures       *pglock.Tenures // how the workers' log readers and lock holders are doing
	provider      mailProvider
	Sender        provider.Sender
	keysGenerated func()                 // counts DKIM keys made, for /metrics
	readModelLate func(projections.Name) // counts read models found late, for /metrics
	dkimKeys      sync.Map               // opened signing keys by domain id/selector
	Blobs         blob.Store             // the blob store as it is: sealed content, and plain blobs of older emails
	Content       *datakeys.Blobs        // emails' content in Blobs, sealed with their data keys
	Scanner       *scan.Scanner
	Egress        egress.Policy
	Now           func() time.Time
	proxies       []netip.Prefix // MAILROOM_TRUSTED_PROXIES
	ready         readyCache
	readiness     *httpserver.ReadinessLog // shared by the listeners, so each change is one line
	stopping      atomic.Bool              // a stop signal came: /readyz answers 503
}

// PoolSize is the database pool a process needs unless the database URL
// sets pool_max_conns: the API's and projectors' share, and for workers a
// connection per three emails in flight. An email holds a connection only
// for its short statements, never while the provider answers, so a third
// keeps jobs from queueing for connections (and the API from queueing
// behind jobs) without opening one per job.
func PoolSize(cfg config.Config) int {
	n := database.DefaultConns
	if cfg.Has("workers") {
		n += cfg.ProviderConcurrency / 3
	}
	return n
}

// routedManager is a process manager RunWorkers puts on the router.
type routedManager struct {
	name   string
	handle processmanagers.Handler
}

// routed lists the router's process managers.
func (a *App) routed() []routedManager {
	return []routedManager{
		{"domain-identities", processmanagers.Identities(a.Identities, a.Commands.Domain, a.Box, a.Log)},
		{"email-release", a.releaser().Handle},
	}
}

// CheckPoolSize refuses a pool too small for cfg's roles to make progress.
// Each projector, and each of the routed process managers of a worker,
// holds a connection in a transaction while it reads the log or does its
// work on another one, and the log's readers share one more, held on
// LISTEN for as long as they run: with every connection held so, all of
// them wait for ever. One more than those holders is the least that always
// moves.
func CheckPoolSize(cfg config.Config, conns, routed int) error {
	need := 1
	if cfg.Has("projections") {
		need += len(projections.Names)
	}
	if cfg.Has("workers") {
		need += routed
	}
	if cfg.Has("projections") || cfg.Has("workers") {
		need++ // the log's LISTEN connection
	}
	if conns < need {
		return fmt.Errorf("the database pool holds %d connections (pool_max_conns in MAILROOM_DATABASE_URL); the roles %s need at least %d: "+
			"each projector and process manager holds one while it works on another, and the log's readers one on LISTEN", conns, strings.Join(cfg.Roles, ","), need)
	}
	return nil
}

// connectionsAtMost is how many connections to PostgreSQL this process
// may hold at once: its pool, and for workers the job queue's pool, a
// connection of its own for each lock holder (each log reader, the webhook
// sweep, the job queue's liveness, SES feedback) and one for each timed
// pass (the domain poll, retention) while it runs.
func (a *App) connectionsAtMost() int {
	n := int(a.Pool.Config().MaxConns)
	if a.Config.Has("workers") {
		const (
			jobReaders  = 2 // sending and webhooks; the router's are routed()
			lockHolders = 2 // the webhook sweep, the job queue's liveness
			timedPasses = 2 // the domain poll, retention
		)
		n += jobs.PoolConns + jobReaders + len(a.routed()) + lockHolders + timedPasses
		if a.provider.ses != nil && a.Config.SESEventsQueueURL != "" {
			n++ // SES feedback's lock
		}
	}
	return n
}

// warnConnectionSlots warns when PostgreSQL takes fewer connections, for
// every client together, than this process alone may open: under load its
// pools would take the slots its lock holders need to reconnect, and other
// processes would find none.
func (a *App) warnConnectionSlots(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var slots, roleLimit int
	err := a.Pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int
		- current_setting('superuser_reserved_connections')::int
		- coalesce(current_setting('reserved_connections', true)::int, 0),
		(SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user)`).Scan(&slots, &roleLimit)
	if err != nil {
		return // sized by the operations guide all the same
	}
	limit, by := slots, "max_connections, less the slots reserved for superusers"
	if roleLimit >= 0 && roleLimit < slots {
		limit, by = roleLimit, "the role's CONNECTION LIMIT"
	}
	if most := a.connectionsAtMost(); most > limit {
		a.Log.Warn("PostgreSQL takes fewer connections than this process alone may open; raise them, or lower pool_max_conns and MAILROOM_PROVIDER_CONCURRENCY (see \"PostgreSQL connections\" in the operations guide)",
			"process_may_open", most, "server_takes", limit, "limit", by)
	}
}

// WarnUnknownVariables names the MAILROOM_* variables of the environment
// that name no setting: misspelt, most likely, and without effect.
func WarnUnknownVariables(cfg config.Config, log *slog.Logger) {
	if unknown := cfg.UnknownVariables(); len(unknown) > 0 {
		var meant []string
		for _, v := range unknown {
			if m := cfg.Meant(v); m != "" {
				meant = append(meant, v+" -> "+m)
			}
		}
		args := []any{"variables", strings.Join(unknown, ",")}
		if len(meant) > 0 {
			args = append(args, "did_you_mean", strings.Join(meant, ","))
		}
		log.Warn("MAILROOM_* variables that name no setting have no effect; misspelt?", args...)
	}
}

// Open connects to the database (creating and migrating it) and the event
// store, and prepares the read-model tables.
func Open(ctx context.Context, cfg config.Config, log *slog.Logger) (*App, error) {
	return OpenOn(ctx, cfg, log, nil)
}

// OpenOn is Open for a process that serves on ls (Listen): it also checks
// that the database pool is large enough for the roles, and says on ls's
// /readyz what the start is doing.
func OpenOn(ctx context.Context, cfg config.Config, log *slog.Logger, ls *Listeners) (*App, error) {
	if err := Check(cfg); err != nil {
		return nil, err
	}
	WarnUnknownVariables(cfg, log)
	if ls != nil {
		for _, c := range cfg.Cautions() {
			log.Warn(c)
		}
	}
	pool, err := openMigrated(ctx, cfg, log, ls)
	if err != nil {
		return nil, err
	}
	masterKey, generated, err := cfg.LoadMasterKey()
	if err != nil {
		pool.Close()
		return nil, err
	}
	previous, err := cfg.LoadPreviousKeys()
	if err != nil {
		pool.Close()
		return nil, err
	}
	box, err := secretbox.New(masterKey, previous...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	store, err := openStore(cfg, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	metrics := ls.Metrics()
	var keyOpts []datakeys.Option
	if _, inDatabase := store.(*postgres.Store); inDatabase {
		keyOpts = append(keyOpts, datakeys.SharesLog())
		if err := postgres.CheckWrittenHere(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	keys := datakeys.New(pool, box, keyOpts...)
	if err := keys.CheckMasterKey(ctx); err != nil {
		pool.Close()
		if errors.Is(err, datakeys.ErrWrongMasterKey) {
			if file := cfg.MasterKeyFile(); file != "" {
				if generated {
					// Refused before anything was sealed under it: a key
					// left behind would be taken up by the next command.
					os.Remove(file)
					return nil, fmt.Errorf("%w: no development key was found at %s (MAILROOM_DATA_DIR), and this database was used "+
						"with another; run from the directory the server uses, or set MAILROOM_DATA_DIR or MAILROOM_MASTER_KEY; "+
						"if that key is lost, what it sealed is lost too: start afresh with another database (make reset does so for the default development setup)", err, file)
				}
				return nil, fmt.Errorf("%w: the development key is read from %s (MAILROOM_DATA_DIR); run from the directory "+
					"the server uses, or set MAILROOM_DATA_DIR or MAILROOM_MASTER_KEY", err, file)
			}
			return nil, fmt.Errorf("%w: MAILROOM_MASTER_KEY is not the key this database was used with", err)
		}
		return nil, err
	}
	if generated {
		log.Warn("generated a development master key; what it seals cannot be read without this file, so keep it "+
			"(production takes MAILROOM_MASTER_KEY with MAILROOM_ENV=production)", "file", cfg.MasterKeyFile())
	}
	addressKeys, err := keys.AddressKeys(ctx, append([][]byte{masterKey}, previous...)...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	a := &App{Config: cfg, Log: log, Pool: pool, Ledger: store, Keys: keys, AddressKeys: addressKeys, Box: box,
		Store: meter(sealed.New(store, keys), metrics.Registry()), Now: now, Metrics: metrics}
	a.Waiter = projections.NewWaiter(pool, cfg.ConsistencyTimeout)
	a.Runner = projections.NewRunner(pool, a.Store, a.Waiter, log, projections.All(addressKeys)...)
	metrics.Registry().MustRegister(newProjectionCollector(a.Runner), newStuckCollector(pool), newClockCollector(pool), newBacklogCollector(pool))
	if pg, ok := store.(*postgres.Store); ok {
		metrics.Registry().MustRegister(newHeldBackCollector(pg))
	}
	if skew, err := clockSkew(ctx, pool); err == nil && skew.Abs() > maxClockSkew {
		log.Warn("this process's clock differs from PostgreSQL's; keep every machine's clock in sync (NTP): job schedules, "+
			"webhook signature times and recorded times follow each process's clock", "ahead_by", skew.Round(time.Millisecond))
	}
	a.readiness = httpserver.NewReadinessLog(log)
	a.Outcomes = outcomes.New(metrics.Registry())
	a.Tenures = &pglock.Tenures{}
	metrics.Registry().MustRegister(newTenureCollector(a.Tenures))
	a.keysGenerated = newKeyCounter(metrics.Registry())
	a.readModelLate = newLateCounter(metrics.Registry())
	if err := a.open(ctx, ls); err != nil {
		a.Close()
		return nil, err
	}
	a.warnUnopenable(ctx)
	return a, nil
}

// openMigrated opens the database and migrates it. A serving process (ls
// set) whose database does not answer waits for it, trying again after a
// pause that grows to startPauseMax: started with or before PostgreSQL (a
// machine's boot, a compose file, a failover under way), it serves once
// the database does, instead of exiting for a supervisor to start again.
// Meanwhile /healthz answers starting and /readyz says why. Operator
// commands (ls nil) fail at once.
func openMigrated(ctx context.Context, cfg config.Config, log *slog.Logger, ls *Listeners) (*pgxpool.Pool, error) {
	for pause := time.Second; ; pause = min(2*pause, startPauseMax) {
		pool, err := database.OpenSized(ctx, cfg.DatabaseURL, PoolSize(cfg))
		if err == nil {
			ls.Starting("migrating the database")
			if err = database.Migrate(ctx, pool); err == nil {
				return pool, nil
			}
			pool.Close()
		}
		if ls == nil || ctx.Err() != nil || !database.Down(err) {
			return nil, err
		}
		ls.Starting("waiting for the database: " + whyUnreachable(err))
		log.Warn("database unreachable while starting; trying again", "in", pause, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// startPauseMax is the longest pause between a starting process's tries
// to reach its database.
const startPauseMax = 15 * time.Second

// open builds the rest of the app on its stores.
func (a *App) open(ctx context.Context, ls *Listeners) error {
	cfg := a.Config
	resolvers, err := dnscheck.ParseResolvers(cfg.DNSResolvers)
	if err != nil {
		return fmt.Errorf("dns-resolvers: %w", err)
	}
	a.DNS = dnscheck.New(resolvers, cfg.DNSTimeout)
	if a.proxies, err = egress.ParseCIDRs(cfg.TrustedProxies); err != nil {
		return fmt.Errorf("trusted-proxies: %w", err)
	}
	if err := a.openMail(ctx); err != nil {
		return err
	}
	if a.provider, err = openProvider(ctx, cfg, a.Log); err != nil {
		return err
	}
	a.Sender, a.Identities = a.provider.sender, a.provider.identities
	a.Commands = a.newCommands(a.settle)
	if ls != nil {
		// What would stop Serve is found before the process waits for
		// read models, or bootstraps.
		if err := CheckPoolSize(cfg, int(a.Pool.Config().MaxConns), len(a.routed())); err != nil {
			return err
		}
		a.warnConnectionSlots(ctx)
	} else if n := a.Pool.Config().MaxConns; n < 2 {
		// An operator command does one thing at a time, but brings read
		// models up to date (or rebuilds one) in a transaction while it
		// reads the log on another connection: on one, it would wait on
		// itself.
		return fmt.Errorf("the database pool holds %d connection (pool_max_conns in MAILROOM_DATABASE_URL); operator commands need at least 2", n)
	}
	if !cfg.Has("projections") {
		ls.Starting("waiting for a projections process of this release to rebuild read models")
		if err := a.Runner.AwaitRebuilds(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	ls.Starting("preparing read models: rebuilding those whose version changed, or waiting for the process that rebuilds them")
	return a.Runner.Prepare(ctx)
}

func openStore(cfg config.Config, pool *pgxpool.Pool) (eventstore.Store, error) {
	if cfg.EventStoreDB() {
		return esdb.New(cfg.EventStore)
	}
	return postgres.New(pool), nil
}

// Close releases connections.
func (a *App) Close() {
	closeWithin(a.Log, "event store", func() { a.Store.Close() })
	closeWithin(a.Log, "database", a.Pool.Close)
}

// closeWait bounds how long a close waits for connections in use.
const closeWait = 5 * time.Second

// closeWithin runs shut for at most closeWait. Closing a pool waits for
// the connections still in use, and a query stuck on an unreachable
// database would hold the exit for ever.
func closeWithin(log *slog.Logger, what string, shut func()) {
	closed := make(chan struct{}, 1)
	go func() {
		shut()
		closed <- struct{}{}
	}()
	select {
	case <-closed:
	case <-time.After(closeWait):
		log.Warn("connections still in use; not waiting for them", "store", what, "waited", closeWait)
	}
}

// Handler is the HTTP API with /healthz and /readyz. Without an operator
// listener (MAILROOM_OPS_ADDR) it also serves /metrics and the detail of
// /readyz; with one, those are the operator listener's (OpsHandler).
func (a *App) Handler() http.Handler {
	e := a.healthServer(a.Config.OpsAddr == "")
	auth := authn.New(a.Pool, a.Log, a.Now)
	// Per IP before authentication, so bad credentials are limited too; then
	// per credential, then per account (a key refused on its own does not
	// use up its account's allowance).
	perIP := httpserver.NewRateLimiter("IP address", a.Config.IPRateLimit, a.Config.IPRateBurst).Middleware(httpserver.IPKey)
	perCredential := httpserver.NewRateLimiter("credential", a.Config.RateLimit, a.Config.RateBurst).Middleware(authn.RateKey)
	perAccount := httpserver.NewRateLimiter("account", a.Config.AccountRateLimit, a.Config.AccountRateBurst).
		Middleware(func(c echo.Context) string { return authn.From(c).AccountID })

	// One account's uploads may hold a quarter of the process's room for
	// request bodies, so a few slow ones cannot refuse everyone else's. A
	// room under four of the largest bodies has no shares: one such body
	// of an account would fill its share and refuse its every other one.
	share := a.Config.MaxInflightBytes / 4
	if share < httpserver.MaxBodyBytes {
		share = 0
	}
	accountBytes := httpserver.InflightBytesPer(share,
		func(c echo.Context) string { return authn.From(c).AccountID })
	accountLarge := httpserver.LargeInTurns(largeBody, func(c echo.Context) string { return authn.From(c).AccountID })
	api := e.Group("/api", perIP, auth.Tokens(), perCredential, perAccount, accountBytes, accountLarge)
	v1 := e.Group("/v1", perIP, auth.APIKeys(), perCredential, perAccount, accountBytes, accountLarge)
	httpapi.Routes(httpapi.Deps{Commands: a.Commands, Reads: readapi.New(a.Pool, a.clock), RenderDomain: a.RenderDomain, Now: a.clock,
		DefaultRetentionDays: a.Config.RetentionDays}, api, v1)
	unmatched := httpserver.Unmatched(e)
	api.RouteNotFound("/*", unmatched)
	v1.RouteNotFound("/*", unmatched)
	return e
}

// largeBody is the size over which an account's requests are served one
// at a time (httpserver.LargeInTurns): a send with a megabyte of content
// or more.
const largeBody = 1 << 20

// OpsHandler serves /healthz, /readyz with its detail, and /metrics: the
// operator listener, or the only listener of a process without the api role.
func (a *App) OpsHandler() http.Handler { return a.healthServer(true) }

// healthServer is a server with /healthz and /readyz; an operator one also
// tells why it is not ready and serves /metrics.
func (a *App) healthServer(operator bool) *echo.Echo {
	e := httpserver.New(httpserver.Options{Logger: a.Log, Metrics: a.Metrics, NoMetricsRoute: !operator,
		TrustedProxies: a.proxies, MaxInflightBytes: a.Config.MaxInflightBytes})
	httpserver.Health(e, a.Ready, operator, a.readiness)
	return e
}

// readyCacheTTL is how long a readiness answer about the stores is reused,
// so a storm of probes costs the database one check per interval.
const readyCacheTTL = time.Second

// readyBudget bounds one check of the stores, every step of it together.
const readyBudget = 2 * time.Second

// failingAfter is how many failed batches in a row make a projection count
// as failing for readiness; a single blip is retried within a second.
const failingAfter = 3

// readyListMax bounds the quarantined streams /readyz lists.
const readyListMax = 50

type readyCache struct {
	mu    sync.Mutex
	at    time.Time
	notes map[string]any
	err   error
}

// Ready reports whether this instance can serve: both stores reachable, no
// projection failing and each close enough to the head of the log, and
// (workers) the provider not failing and no log reader or lock holder
// failing. Quarantined streams do not make it
// unready, as the service works for every other stream; they are returned
// as notes.
func (a *App) Ready(ctx context.Context) (map[string]any, error) {
	if a.stopping.Load() {
		return nil, errors.New("shutting down")
	}
	notes, err := a.storesReady(ctx)
	if err != nil {
		return nil, err
	}
	if a.Config.Has("workers") {
		if err := a.Outcomes.ProviderFailing(a.Now()); err != nil {
			return nil, err
		}
		if err := workersFailing(a.Tenures); err != nil {
			return nil, err
		}
	}
	return notes, nil
}

// workersFailing names a log reader or lock holder of this process that
// has failed failingAfter times in a row and not recovered: its work
// (sending, webhooks, taking over a dead process's jobs) is not being done
// here while everything else may answer.
func workersFailing(t *pglock.Tenures) error {
	for _, w := range t.List() {
		if w.State != pglock.Failing || w.Failures < failingAfter {
			continue
		}
		// Connection errors name the user, database and host; readiness
		// detail may be served to anyone.
		why := w.Err.Error()
		var connect *pgconn.ConnectError
		if errors.As(w.Err, &connect) || database.Unreachable(w.Err) {
			why = "postgres: " + whyUnreachable(w.Err)
		}
		return fmt.Errorf("worker %s is failing since %s (%d attempts): %s", w.Name, apitime.Format(w.Since), w.Failures, why)
	}
	return nil
}

// storesReady checks the stores and projections at most once per
// readyCacheTTL; concurrent probes wait for one check and share it.
func (a *App) storesReady(ctx context.Context) (map[string]any, error) {
	c := &a.ready
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < readyCacheTTL {
		return c.notes, c.err
	}
	// Not the probe's context: one client hanging up must not fail the
	// answer every other probe shares.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyBudget)
	defer cancel()
	c.notes, c.err = a.checkStores(ctx)
	c.at = time.Now()
	return c.notes, c.err
}

func (a *App) checkStores(ctx context.Context) (map[string]any, error) {
	if err := a.Pool.Ping(ctx); err != nil {
		if st := a.Pool.Stat(); ctx.Err() != nil && st.AcquiredConns() >= st.MaxConns() {
			// PostgreSQL may be fine: the pool had no connection to ask it on.
			return nil, fmt.Errorf("postgres: all %d connections of the pool are in use and none came free in time (pool_max_conns in MAILROOM_DATABASE_URL)", st.MaxConns())
		}
		return nil, fmt.Errorf("postgres unreachable: %s", whyUnreachable(err))
	}
	if err := eventstore.Ping(ctx, a.Store); err != nil {
		// Kept in PostgreSQL, which just answered, the log is slow; on its
		// own servers (EventStoreDB) it does not answer.
		if _, inPostgres := a.Ledger.(*postgres.Store); ctx.Err() != nil && inPostgres {
			return nil, slowCheck("the event store's ping")
		}
		return nil, fmt.Errorf("event store unreachable: %s", whyUnreachable(err))
	}
	// Sends store their content before anything is recorded: a blob
	// directory that takes none (a full disk, no file descriptor left)
	// refuses every one while the database answers.
	if w, ok := a.Blobs.(interface{ Writable() error }); ok && a.Config.Has("api") {
		if err := w.Writable(); err != nil {
			return nil, fmt.Errorf("the blob directory takes no content: %s", fileTrouble(err))
		}
	}
	// Lag is counted no further than the bound, however far behind.
	statuses, err := a.Runner.Status(ctx, a.Config.ReadyMaxLag+1)
	if err != nil {
		if ctx.Err() != nil {
			return nil, slowCheck("counting the projections' lag")
		}
		return nil, fmt.Errorf("projection status: %v", err)
	}
	for _, s := range statuses {
		if f := s.Failing; f != nil && f.Attempts >= failingAfter {
			return nil, fmt.Errorf("projection %s is failing since %s (%d attempts): %s", s.Name, apitime.Format(f.Since.Time), f.Attempts, f.Error)
		}
	}
	var quarantined []map[string]string
	total := 0
	for _, s := range statuses {
		if s.Lag > a.Config.ReadyMaxLag {
			return nil, fmt.Errorf("projection %s lags more than %d events", s.Name, a.Config.ReadyMaxLag)
		}
		for _, q := range s.Quarantined {
			if total++; total <= readyListMax {
				quarantined = append(quarantined, map[string]string{"projection": q.Projection, "stream": q.Stream})
			}
		}
	}
	if total == 0 {
		return nil, nil
	}
	notes := map[string]any{"quarantined": quarantined}
	if total > readyListMax {
		notes["quarantined_streams"] = total
	}
	return notes, nil
}

// fileTrouble says what went wrong with a file without its path, which
// readiness detail, served to anyone without MAILROOM_OPS_ADDR, should not
// show.
func fileTrouble(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error() // "no space left on device"
	}
	return "it cannot be written"
}

// slowCheck is the reason for a check of the stores that ran out of time
// at step after PostgreSQL had answered its ping: slow, not down.
func slowCheck(step string) error {
	return fmt.Errorf("%s did not finish within the readiness check's %s, though PostgreSQL answered its ping: the database or this process is overloaded", step, readyBudget)
}

// whyUnreachable says why a store did not answer without naming its user,
// database, host or port, which connection errors quote: readiness detail
// may be served to anyone (no MAILROOM_OPS_ADDR).
func whyUnreachable(err error) string {
	var pgErr *pgconn.PgError
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case "57P01":
			return "the server ended the connection: shutting down, or an administrator's command (SQLSTATE 57P01)"
		case "57P02":
			return "the server ended the connection: recovering from a crash (SQLSTATE 57P02)"
		case "57P03":
			return "the server is starting up or shutting down (SQLSTATE 57P03)"
		case "53300":
			return "the server has no connection slot left (SQLSTATE 53300: max_connections, or a role's or database's connection limit)"
		case "57014":
			return "a statement was cancelled by a timeout (SQLSTATE 57014: statement_timeout, say)"
		case "25006":
			return "the server takes no writes: read-only (SQLSTATE 25006)"
		case "53100":
			return "the server's disk is full (SQLSTATE 53100)"
		case "53200":
			return "the server is out of memory (SQLSTATE 53200)"
		}
		return "the server refused the connection (SQLSTATE " + pgErr.Code + ")"
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return "no answer in time"
	case errors.As(err, &dnsErr):
		return "its host name does not resolve"
	case errors.As(err, &opErr) && opErr.Err != nil:
		return opErr.Err.Error() // "connect: connection refused"
	}
	return "cannot connect"
}

// HTTPServer returns the server for h with the configured timeouts; every
// listener uses it.
func (a *App) HTTPServer(h http.Handler) *http.Server { return newHTTPServer(a.Config, h, a.Log) }

func newHTTPServer(cfg config.Config, h http.Handler, log *slog.Logger) *http.Server {
	return httpserver.NewServer(h, httpserver.Timeouts{
		Read: cfg.HTTPReadTimeout, Write: cfg.HTTPWriteTimeout, Idle: cfg.HTTPIdleTimeout,
	}, log)
}

// Serve runs the roles of the configuration on ls (Listen) until ctx ends.
func (a *App) Serve(ctx context.Context, ls *Listeners) error {
	// Every process listens: the API role serves the API; others serve
	// /healthz, /readyz and /metrics only, so workers can be probed and
	// scraped. With an operator listener, /metrics and the detail of /readyz
	// are served there only.
	var public http.Handler
	if a.Config.Has("api") {
		public = a.Handler()
	} else {
		public = a.healthServer(a.Config.OpsAddr == "")
	}

	// The roles outlive the listeners: a request in flight at shutdown may
	// wait for its write to reach the read models, which needs the
	// projections of this process.
	roles, stopRoles := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRoles()
	g, rolesCtx := errgroup.WithContext(roles)
	if a.Config.Has("projections") {
		g.Go(func() error { return a.Runner.Run(rolesCtx) })
	}
	if a.Config.Has("workers") {
		g.Go(func() error { return a.RunWorkers(rolesCtx) })
	}
	var ops http.Handler
	if len(ls.handlers) > 1 {
		ops = a.OpsHandler()
	}
	ls.serve(public, ops)
	a.Log.Info("serving", "addr", ls.Addr().String())
	g.Go(ls.wait)
	g.Go(func() error {
		select {
		case <-ctx.Done():
			a.Log.Info("stop signal received; shutting down")
		case <-rolesCtx.Done(): // a role or a server failed
		}
		a.drain(ctx.Err() != nil, ls.servers)
		stopRoles()
		return nil
	})
	err := g.Wait()
	a.Log.Info("stopped")
	return err
}

// drain stops the HTTP servers. On a stop signal an API process first
// answers /readyz with 503 for MAILROOM_SHUTDOWN_DELAY while still
// serving, so that load balancers take it out of rotation before its
// listener closes; then requests in flight get MAILROOM_SHUTDOWN_TIMEOUT
// to finish, and what is left is cut off.
func (a *App) drain(signalled bool, servers []*http.Server) {
	a.stopping.Store(true)
	if d := a.Config.ShutdownDelay; signalled && d > 0 && a.Config.Has("api") {
		a.Log.Info("answering /readyz not ready before closing the listener", "shutdown_delay", d)
		time.Sleep(d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				a.Log.Warn("requests still in flight at the end of the shutdown timeout were cut off",
					"shutdown_timeout", a.Config.ShutdownTimeout, "err", err)
				srv.Close()
			}
		})
	}
	wg.Wait()
}

// SettleInline makes commands bring the affected projections up to date
// themselves instead of waiting for a runner: for operator commands run while
// no server may be running. The projector lock keeps this safe alongside one.
func (a *App) SettleInline() { a.Commands = a.inlineCommands() }

// newCommands returns the command service, settling with settle. The clock
// is read through a.Now on every call so tests may move it.
func (a *App) newCommands(settle commands.Settle) *commands.Service {
	return commands.New(commands.Deps{
		Store: a.Store, Settle: settle, Now: func() time.Time { return a.Now() },
		Box: a.Box, DNS: a.DNS, Region: a.Config.Region,
		Content: a.Content, Egress: a.Egress,
		Identity: a.provider.identityCheck, KeyGenerated: a.keysGenerated, ActiveAPIKeys: a.activeAPIKeys,
		DataKeys: a.Keys, AddressKeys: a.AddressKeys,
		EmailsSentTo: func(ctx context.Context, accountID, addressKey string) ([]string, error) {
			return readapi.New(a.Pool, a.clock).EmailsSentTo(ctx, accountID, addressKey)
		},
		Domains: func(ctx context.Context, accountID, name string) (sendingdomain.State, error) {
			return readapi.SendingDomain(ctx, a.Pool, accountID, name)
		},
		SendableDomain: func(ctx context.Context, accountID, name string) (string, error) {
			return readapi.SendableDomainID(ctx, a.Pool, accountID, name)
		},
		DomainsNamed: func(ctx context.Context, name string) ([]sendingdomain.State, error) {
			return readapi.DomainsNamed(ctx, a.Pool, name)
		},
		DomainCount: func(ctx context.Context, accountID string) (int, error) {
			return readapi.DomainCount(ctx, a.Pool, accountID)
		},
		EndpointIDs: func(ctx context.Context, accountID string) ([]string, error) {
			return readapi.EndpointIDs(ctx, a.Pool, accountID)
		},
	})
}

func (a *App) inlineCommands() *commands.Service {
	return a.newCommands(func(ctx context.Context, pos eventstore.Position, names ...projections.Name) error {
		// An event becomes readable only once older transactions end, so
		// catch up until the projection has really passed pos.
		deadline := time.Now().Add(a.Config.ConsistencyTimeout)
		for _, n := range names {
			p := a.Runner.Projector(n)
			if p == nil {
				continue
			}
			for {
				at, err := a.Runner.CatchUp(ctx, p)
				if err != nil {
					a.Log.Warn("projection catch-up", "projection", n, "err", err)
					return err
				}
				if !at.Less(pos) {
					break
				}
				if time.Now().After(deadline) {
					return &projections.LagError{Behind: []projections.Name{n}, Timeout: a.Config.ConsistencyTimeout}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return nil
	})
}

// DomainPoller returns the background checker of pending domains.
func (a *App) DomainPoller() *processmanagers.DomainPoller {
	return &processmanagers.DomainPoller{Pool: a.Pool, Commands: a.Commands, Now: func() time.Time { return a.Now() }, Interval: a.Config.DomainPollInterval, Log: a.Log}
}

// Retention returns the background eraser of emails past retention.
func (a *App) Retention() *processmanagers.Retention {
	return &processmanagers.Retention{Pool: a.Pool, Commands: a.Commands, DefaultDays: a.Config.RetentionDays,
		Now: func() time.Time { return a.Now() }, Interval: a.Config.RetentionInterval, Log: a.Log}
}

// sendJobTimeout bounds one send job: the preparation deadline, then the
// provider call and its recording. River rescues a job still running a
// minute after it (its process is presumed dead).
const sendJobTimeout = processmanagers.PrepareDeadline + time.Minute

// RunWorkers runs the process managers, the job queue and the domain
// poller until ctx ends.
func (a *App) RunWorkers(ctx context.Context) error {
	// The router's handlers and the send planner go by clear fields only
	// (ids, accounts, types), so they read the log as recorded and open
	// no personal data they would not use.
	router, err := processmanagers.NewRouter(a.Pool, a.Ledger, a.Log, processmanagers.WithTenures(a.Tenures),
		processmanagers.WithPassingErrors(database.Unreachable))
	if err != nil {
		return err
	}
	for _, m := range a.routed() {
		router.Handle(m.name, m.handle)
	}
	// Sending and webhook delivery are River jobs: one reader per process
	// manager turns events into them, and every worker process's client
	// claims and works them.
	workers := river.NewWorkers()
	river.AddWorker(workers, a.sendWorker(a.rateLimit(ctx)))
	hooks := a.webhooks()
	webhookReader := a.webhookJobs(hooks, workers)
	clientID := jobs.NewClientID()
	queuePool, err := jobs.OpenPool(ctx, a.Pool)
	if err != nil {
		return fmt.Errorf("job queue: %w", err)
	}
	defer closeWithin(a.Log, "job queue", queuePool.Close)
	client, err := jobs.NewClient(queuePool, jobs.Config{
		ID: clientID,
		Queues: map[string]int{
			jobs.EmailQueue:   a.Config.ProviderConcurrency,
			jobs.WebhookQueue: a.Config.WebhookConcurrency,
		},
		Workers:    workers,
		JobTimeout: sendJobTimeout,
		Log:        a.Log,
	})
	if err != nil {
		return fmt.Errorf("job queue: %w", err)
	}
	sends := jobs.NewReader(processmanagers.EmailReaderName, a.Pool, a.Ledger, processmanagers.PlanSends, a.Log)
	sends.Inherit = processmanagers.EmailShardCheckpoints
	sends.Tenures, sends.Passing = a.Tenures, database.Unreachable
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return router.Run(ctx) })
	g.Go(func() error { return sends.Run(ctx) })
	g.Go(func() error { return webhookReader.Run(ctx) })
	// The liveness lock is held until the client has stopped, not only
	// until shutdown begins: the jobs still running meanwhile are this
	// process's, and another that saw the lock free would run them again.
	alive := make(chan struct{})
	liveCtx, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	g.Go(func() error {
		jobs.KeepAlive(liveCtx, a.Pool, clientID, a.Tenures, a.Log, alive)
		return nil
	})
	g.Go(func() error {
		defer endLife()
		// Claim nothing before the liveness lock tells others we are alive.
		select {
		case <-alive:
		case <-ctx.Done():
			return nil
		}
		return jobs.Run(ctx, client, a.Log)
	})
	g.Go(func() error {
		hooks.RunSweep(ctx, client)
		return nil
	})
	poller := a.DomainPoller()
	g.Go(func() error { return poller.Run(ctx) })
	retention := a.Retention()
	g.Go(func() error { return retention.Run(ctx) })
	if a.provider.ses != nil && a.Config.SESEventsQueueURL != "" {
		g.Go(func() error {
			processmanagers.SESFeedback(ctx, a.provider.ses, a.Commands, a.Pool, a.Tenures, a.Log)
			return nil
		})
	}
	return g.Wait()
}

// now is the clock of what the app records: in UTC, so that the times in
// events, messages and answers read alike whatever the process's zone.
func now() time.Time { return time.Now().UTC() }
