// Package postgres is the embedded PostgreSQL adapter of the event store port.
//
// Global order is the pair (transaction id, sequence): every event row stores
// pg_current_xact_id() of the transaction that wrote it and a bigserial. A
// sequence number is taken at insert but becomes visible at commit, so
// ordering by it alone lets a reader skip an event whose transaction commits
// after a later one. Readers therefore only read events whose transaction id
// is below the oldest append still running (see horizon): every transaction
// below that horizon that could write here has finished, so nothing can
// appear behind a reader's position later.
//
// Appends to one stream are serialised by a transaction-scoped advisory lock
// taken before the transaction is assigned its id, which keeps a stream's
// revision order and its $all order identical, and tells the horizon which
// running transactions may be appending.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
)

const (
	// notifyChannel wakes live subscriptions when an append commits.
	notifyChannel = "mailroom_events"
	// defaultPollInterval bounds how late a subscriber sees an event that
	// became readable because an unrelated older transaction ended (no
	// notification is sent for that).
	defaultPollInterval = 250 * time.Millisecond
	// subscriptionBatch is how many events a subscription reads per query.
	subscriptionBatch = 256
	// recentEvents and recentBytes bound how much of the head of $all a
	// store keeps for its readers (see recentLog), each give or take half as
	// much again: a few seconds of a busy log of ordinary events, and at
	// most 24 MiB however large they are, well within a process's 200 MB.
	recentEvents = 20000
	recentBytes  = 16 << 20
	// knownHeads is how many streams' heads a store remembers (see heads).
	knownHeads = 10000
)

// ErrClosed is returned by Subscription.Next after the subscription (or its
// store) was closed.
var ErrClosed = errors.New("eventstore/postgres: subscription closed")

// Store is the PostgreSQL event store. It is safe for concurrent use.
type Store struct {
	pool         *pgxpool.Pool
	pollInterval time.Duration
	recent       *recentLog // the head of $all, shared by this process's readers
	heads        *heads     // streams' heads last read or written here

	mu       sync.Mutex
	subs     map[*subscription]struct{}
	listener *listener // running while subs is not empty
	closed   bool

	notifying   bool // a notification is being sent
	notifyAgain bool // an append committed since it was sent
}

var _ eventstore.Store = (*Store)(nil)

// New returns a store on pool, whose schema must be migrated
// (database.Migrate). The pool stays owned by the caller.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, pollInterval: defaultPollInterval, subs: map[*subscription]struct{}{},
		recent: newRecentLog(recentEvents, recentBytes), heads: newHeads(knownHeads)}
}

// Close closes the store's open subscriptions; SubscribeAll fails after it.
// It does not close the pool.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	subs := make([]*subscription, 0, len(s.subs))
	for sub := range s.subs {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	for _, sub := range subs {
		sub.Close()
	}
	return nil
}

// Append writes events at the end of stream in one transaction. An event
// with a nil ID gets a random one. Appending no events only checks expected
// (returning a *ConflictError on mismatch); its result carries the stream's
// current last revision and a zero Position.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if stream == "" {
		return eventstore.AppendResult{}, errors.New("eventstore/postgres: empty stream name")
	}
	if len(events) == 0 {
		return s.checkExpected(ctx, stream, expected)
	}
	res, err := s.AppendMany(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	return res[0], nil
}

// AppendMany writes every part in one transaction: all or nothing. Each
// part must name a different stream and carry at least one event.
func (s *Store) AppendMany(ctx context.Context, parts ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	if err := eventstore.CheckParts(parts); err != nil {
		return nil, err
	}
	prepared := make([]eventstore.StreamAppend, len(parts))
	for i, p := range parts {
		events := append([]eventstore.EventData(nil), p.Events...) // do not touch the caller's slice
		for j := range events {
			if events[j].ID == uuid.Nil {
				events[j].ID = uuid.New()
			}
		}
		prepared[i] = eventstore.StreamAppend{Stream: p.Stream, Expected: p.Expected, Events: events}
	}

	if len(prepared) == 1 {
		p := prepared[0]
		if rev, exact := p.Expected.Revision(); exact {
			if h, ok := s.heads.get(p.Stream); ok && h.revision == rev {
				res, hash, done, err := s.appendAtHead(ctx, p, h)
				if err != nil {
					s.heads.forget(p.Stream)
					return nil, err
				}
				if done {
					s.heads.put(p.Stream, head{revision: res.NextRevision, hash: hash})
					s.announce()
					return []eventstore.AppendResult{res}, nil
				}
				s.heads.forget(p.Stream) // stale: the ordinary append decides
			}
		}
	}
	if allNew(prepared) {
		return s.appendNew(ctx, prepared)
	}
	// Read committed whatever the server default: the stream heads must be
	// read with a snapshot taken after the stream locks were granted.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	res, hashes, err := appendTx(ctx, tx, prepared, false)
	if errors.Is(err, errStreamExists) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, existing(ctx, s.pool, prepared)
	}
	if err != nil {
		s.forgetHeads(prepared)
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		s.forgetHeads(prepared)
		return nil, fmt.Errorf("eventstore/postgres: commit append to %s: %w", prepared[0].Stream, err)
	}
	s.rememberHeads(prepared, res, hashes)
	s.announce()
	return res, nil
}

// rememberHeads notes the heads an append left; forgetHeads drops those an
// append may have found otherwise.
func (s *Store) rememberHeads(parts []eventstore.StreamAppend, res []eventstore.AppendResult, hashes []string) {
	for i, p := range parts {
		s.heads.put(p.Stream, head{revision: res[i].NextRevision, hash: hashes[i]})
	}
}

func (s *Store) forgetHeads(parts []eventstore.StreamAppend) {
	for _, p := range parts {
		s.heads.forget(p.Stream)
	}
}

// announce wakes this process's subscriptions at once and other processes'
// through a notification sent after the commit. A NOTIFY inside the append
// would take PostgreSQL's global notification lock at commit and hold it
// through the WAL flush, serialising every append; sent outside, and
// coalesced (one in flight; appends committed meanwhile share the next),
// it costs the appends nothing. A lost notification is covered by the
// subscribers' poll.
func (s *Store) announce() {
	s.wakeAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notifying {
		s.notifyAgain = true
		return
	}
	s.notifying = true
	go s.notifyLoop()
}

func (s *Store) notifyLoop() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, '')", notifyChannel)
		cancel()
		s.mu.Lock()
		if !s.notifyAgain {
			s.notifying = false
			s.mu.Unlock()
			return
		}
		s.notifyAgain = false
		s.mu.Unlock()
	}
}

func allNew(parts []eventstore.StreamAppend) bool {
	for _, p := range parts {
		if !p.Expected.IsNoStream() {
			return false
		}
	}
	return true
}

// appendNew appends to streams that must all be new with BEGIN and COMMIT
// sent in the same round trip as the statements between them.
func (s *Store) appendNew(ctx context.Context, parts []eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: acquire: %w", err)
	}
	defer conn.Release()
	res, hashes, err := appendTx(ctx, conn, parts, true)
	endOpenTx(ctx, conn)
	if errors.Is(err, errStreamExists) {
		// On the connection held: asking the pool for a second one while
		// holding this could wait for ever once every connection is held
		// so (a restart's redelivered fan-outs all find their streams).
		return nil, existing(ctx, conn, parts)
	}
	if err != nil {
		return nil, err
	}
	s.rememberHeads(parts, res, hashes)
	s.announce()
	return res, nil
}

// batchSender is a transaction, or a connection for a batch that opens and
// commits its own.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// errStreamExists is appendTx finding, in one round trip, that a stream
// expected to be new has events.
var errStreamExists = errors.New("eventstore/postgres: stream exists")

// querier runs a query on a pool or on a connection already held.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// existing is the conflict of an append of new streams that found one of
// them existing: the first such part's.
func existing(ctx context.Context, q querier, parts []eventstore.StreamAppend) error {
	streams := make([]string, len(parts))
	for i, p := range parts {
		streams[i] = p.Stream
	}
	rows, err := q.Query(ctx, "SELECT stream_id, last_revision FROM streams WHERE stream_id = ANY($1)", streams)
	if err != nil {
		return fmt.Errorf("eventstore/postgres: read stream heads: %w", err)
	}
	last := map[string]int64{}
	for rows.Next() {
		var id string
		var rev int64
		if err := rows.Scan(&id, &rev); err != nil {
			rows.Close()
			return fmt.Errorf("eventstore/postgres: read stream heads: %w", err)
		}
		last[id] = rev
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("eventstore/postgres: read stream heads: %w", err)
	}
	for _, p := range parts {
		if rev, ok := last[p.Stream]; ok {
			return &eventstore.ConflictError{Stream: p.Stream, Expected: p.Expected, Actual: uint64(rev), ActualExists: true}
		}
	}
	return fmt.Errorf("eventstore/postgres: append to %s: a stream expected to be new existed, then did not", parts[0].Stream)
}

// insertEvents writes one stream's events, in revision order from $3, in
// one statement; seq follows that order.
const insertEvents = `INSERT INTO events (event_id, stream_id, stream_revision, event_type, schema_version, data, metadata, hash)
	SELECT e.id, $2, $3 + e.n - 1, e.typ, e.ver, e.data::json, e.meta::json, e.hash
	FROM unnest($1::uuid[], $4::text[], $5::integer[], $6::text[], $7::text[], $8::text[])
		WITH ORDINALITY AS e(id, typ, ver, data, meta, hash, n)
	ORDER BY e.n
	RETURNING transaction_id, seq`

// eventRows are a stream's events as insertEvents' array arguments, each
// with its chained hash.
type eventRows struct {
	ids, types, data, metas, hashes []string
	versions                        []int32
}

// rowsOf makes the rows of p's events, the first at revision next, chained
// from prevHash.
func rowsOf(p eventstore.StreamAppend, next uint64, prevHash string) (eventRows, error) {
	n := len(p.Events)
	r := eventRows{ids: make([]string, n), types: make([]string, n), data: make([]string, n),
		metas: make([]string, n), hashes: make([]string, n), versions: make([]int32, n)}
	for j, ev := range p.Events {
		prevHash = eventstore.ChainHash(prevHash, p.Stream, next+uint64(j), ev)
		meta, err := json.Marshal(ev.Metadata)
		if err != nil {
			return r, err
		}
		r.ids[j], r.types[j], r.versions[j] = ev.ID.String(), ev.Type, int32(ev.SchemaVersion)
		r.data[j], r.metas[j], r.hashes[j] = string(ev.Data), string(meta), prevHash
	}
	return r, nil
}

func (r eventRows) lastHash() string { return r.hashes[len(r.hashes)-1] }

// args are insertEvents' arguments for stream from revision next.
func (r eventRows) args(stream string, next uint64) []any {
	return []any{r.ids, stream, int64(next), r.types, r.versions, r.data, r.metas, r.hashes}
}

// endOpenTx ends a transaction a failed statement left open on conn, or
// drops the connection so the pool never hands it out half-done.
func endOpenTx(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
		conn.Conn().Close(rctx)
	}
}

// appendTx appends parts inside tx, a read committed transaction that must
// not have been assigned a transaction id yet (no prior writes): the id must
// be taken after every stream lock, which readers rely on (see horizon).
// Events must be validated.
//
// When every part expects a new stream, the heads are known without reading
// them (none, and no previous hash), so the locks, the head inserts and the
// events go in one round trip: a head insert that meets an existing stream
// fails with errStreamExists. Otherwise the heads are read first.
//
// own (all streams new only) makes the batch begin and commit its own
// transaction, tx then being a connection outside any. Next to the results
// come the hashes of each stream's last event.
func appendTx(ctx context.Context, tx batchSender, parts []eventstore.StreamAppend, own bool) ([]eventstore.AppendResult, []string, error) {
	// Lock every stream first, in one order for all writers so that two
	// multi-stream appends cannot deadlock (an advisory lock assigns no
	// transaction id), then read the heads in a separate statement so that
	// its snapshot is taken after the previous holders committed.
	streams := make([]string, len(parts))
	allNew := true
	for i, p := range parts {
		streams[i] = p.Stream
		allNew = allNew && p.Expected.IsNoStream()
	}
	if own && !allNew {
		return nil, nil, errors.New("eventstore/postgres: an append of existing streams needs a transaction")
	}
	locks := slices.Clone(streams)
	slices.Sort(locks)
	b := &pgx.Batch{}
	if own {
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	}
	for _, st := range locks {
		b.Queue("SELECT pg_advisory_xact_lock($1, hashtext($2))", pglock.StreamClass, st)
	}
	type streamHead struct {
		last int64
		hash string
	}
	heads := make(map[string]streamHead, len(parts))
	if !allNew {
		b.Queue("SELECT stream_id, last_revision, last_hash FROM streams WHERE stream_id = ANY($1)", streams)
		br := tx.SendBatch(ctx, b)
		var err error
		for range locks {
			if _, err = br.Exec(); err != nil {
				break
			}
		}
		if err == nil {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				for rows.Next() {
					var (
						id string
						h  streamHead
					)
					if err = rows.Scan(&id, &h.last, &h.hash); err != nil {
						break
					}
					heads[id] = h
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, nil, fmt.Errorf("eventstore/postgres: lock stream %s: %w", parts[0].Stream, err)
		}
		b = &pgx.Batch{}
	}

	lastRevs := make([]uint64, len(parts))
	lastHashes := make([]string, len(parts))
	for i, p := range parts {
		h, exists := heads[p.Stream]
		current := uint64(0)
		if exists {
			current = uint64(h.last)
		}
		if !p.Expected.Satisfied(current, exists) {
			return nil, nil, &eventstore.ConflictError{Stream: p.Stream, Expected: p.Expected, Actual: current, ActualExists: exists}
		}
		next := uint64(0)
		if exists {
			next = current + 1
		}
		rows, err := rowsOf(p, next, h.hash)
		if err != nil {
			return nil, nil, err
		}
		prevHash := rows.lastHash()
		lastRevs[i], lastHashes[i] = next+uint64(len(p.Events))-1, prevHash
		if allNew {
			// A unique violation here is the stream existing.
			b.Queue(`INSERT INTO streams (stream_id, last_revision, last_hash) VALUES ($1, $2, $3)`,
				p.Stream, int64(lastRevs[i]), prevHash)
		} else {
			b.Queue(`INSERT INTO streams (stream_id, last_revision, last_hash) VALUES ($1, $2, $3)
				ON CONFLICT (stream_id) DO UPDATE SET last_revision = EXCLUDED.last_revision, last_hash = EXCLUDED.last_hash`,
				p.Stream, int64(lastRevs[i]), prevHash)
		}
		b.Queue(insertEvents, rows.args(p.Stream, next)...)
	}
	if own {
		b.Queue("COMMIT")
	}
	br := tx.SendBatch(ctx, b)
	var err error
	if own {
		_, err = br.Exec()
	}
	if allNew && err == nil {
		for range locks {
			if _, err = br.Exec(); err != nil {
				break
			}
		}
	}
	res := make([]eventstore.AppendResult, len(parts))
	for i := range parts {
		if err != nil {
			break
		}
		if _, err = br.Exec(); err != nil { // the stream head
			if allNew && isUniqueViolation(err, "streams_pkey") {
				br.Close()
				return nil, nil, errStreamExists
			}
			break
		}
		var rows pgx.Rows
		if rows, err = br.Query(); err != nil {
			break
		}
		var pos eventstore.Position
		for rows.Next() {
			var p eventstore.Position
			var seq int64
			if err = rows.Scan(&p.Commit, &seq); err != nil {
				break
			}
			if p.Prepare = uint64(seq); pos.Less(p) {
				pos = p
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		res[i] = eventstore.AppendResult{NextRevision: lastRevs[i], Position: pos}
	}
	if own && err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("eventstore/postgres: append to %s: %w", parts[0].Stream, err)
	}
	return res, lastHashes, nil
}

// isUniqueViolation reports err being a unique violation of constraint.
func isUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}

// checkExpected serves an append of no events.
func (s *Store) checkExpected(ctx context.Context, stream string, expected eventstore.ExpectedVersion) (eventstore.AppendResult, error) {
	var last int64
	exists := true
	err := s.pool.QueryRow(ctx, "SELECT last_revision FROM streams WHERE stream_id = $1", stream).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		exists, err = false, nil
	}
	if err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("eventstore/postgres: read stream head %s: %w", stream, err)
	}
	current := uint64(0)
	if exists {
		current = uint64(last)
	}
	if !expected.Satisfied(current, exists) {
		return eventstore.AppendResult{}, &eventstore.ConflictError{Stream: stream, Expected: expected, Actual: current, ActualExists: exists}
	}
	return eventstore.AppendResult{NextRevision: current}, nil
}

const selectEvents = `SELECT transaction_id, seq, event_id, stream_id, stream_revision, event_type,
	schema_version, data, metadata, hash, recorded_at FROM events `

// ReadStream returns up to max events of stream from revision from on.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, max int) ([]eventstore.RecordedEvent, error) {
	if max <= 0 {
		return nil, fmt.Errorf("eventstore/postgres: read %s: max must be positive, got %d", stream, max)
	}
	rows, err := s.pool.Query(ctx, selectEvents+`WHERE stream_id = $1 AND stream_revision >= $2
		ORDER BY stream_revision LIMIT $3`, stream, clampInt64(from), max)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: read %s: %w", stream, err)
	}
	evs, err := scanEvents(rows, max)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: read %s: %w", stream, err)
	}
	if n := len(evs); n > 0 && n < max {
		// Read to its end: the next append is likely at this head.
		s.heads.put(stream, head{revision: evs[n-1].StreamRevision, hash: evs[n-1].Hash})
	}
	if len(evs) == 0 {
		var exists bool
		if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM streams WHERE stream_id = $1)", stream).Scan(&exists); err != nil {
			return nil, fmt.Errorf("eventstore/postgres: read %s: %w", stream, err)
		}
		if !exists {
			return nil, eventstore.ErrStreamNotFound
		}
	}
	return evs, nil
}

// horizon is the transaction id below which every transaction that could
// write this log has ended, as of the statement's snapshot: the oldest one
// still running that may be appending here; the snapshot's xmax when none
// is left. pg_snapshot_xmin alone would let any long transaction hold back
// every reader: one in another database of the server (transaction ids are
// the whole server's), or one here that writes no event, such as the job
// queue's maintenance moving thousands of due jobs, or a projector's batch.
//
// Every append holds a stream lock of this database (pglock.StreamClass)
// from before its transaction takes an id until it ends (see appendTx). So
// a running id is left out when the lock table shows it held by a session
// that holds no stream lock here: it was running when the snapshot was
// taken and still is when the lock table is read, after it, and an append
// would hold its stream lock all that time. Only the session running a
// transaction holds its id's lock exclusively (others wait on it with a
// share lock, and may be granted one an instant after it ended), so that
// is the row that names the session. The lock table is read once,
// as one consistent view of such locks (neither kind is a fast-path lock),
// and only when some transaction is running. An id the lock table no
// longer shows (ended since) or shows with no session (a prepared
// transaction) counts as running. (1836213622 is pglock.StreamClass.)
const horizon = `least(pg_snapshot_xmax(pg_current_snapshot()), (WITH l AS MATERIALIZED (
		SELECT locktype, transactionid, pid, mode, granted, classid, objsubid, database FROM pg_locks
		WHERE locktype IN ('transactionid', 'advisory'))
	SELECT min(x.id) FROM pg_snapshot_xip(pg_current_snapshot()) x(id)
	WHERE x.id::xid NOT IN (SELECT t.transactionid FROM l t WHERE t.locktype = 'transactionid'
		AND t.mode = 'ExclusiveLock' AND t.granted AND t.pid IS NOT NULL
		AND t.pid NOT IN (SELECT s.pid FROM l s WHERE s.locktype = 'advisory' AND s.pid IS NOT NULL
			AND s.classid = 1836213622 AND s.objsubid = 2
			AND s.database = (SELECT oid FROM pg_database WHERE datname = current_database())))))`

// readAllSQL reads $all after ($1, $2) below the transaction-id horizon.
const readAllSQL = selectEvents + `WHERE (transaction_id, seq) > ($1, $2)
	AND transaction_id < ` + horizon + `
	ORDER BY transaction_id, seq LIMIT $3`

// ReadAll returns up to max events positioned after from. It reads only
// below the horizon, so an append left open holds back every reader until
// it ends. The reading statement must not be
// assigned a transaction id itself, hence pg_current_snapshot() rather than
// pg_current_xact_id().
func (s *Store) ReadAll(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
	if max <= 0 {
		return nil, fmt.Errorf("eventstore/postgres: read $all: max must be positive, got %d", max)
	}
	return s.recent.read(ctx, from, max, s.readAll)
}

// readAll is ReadAll's query.
func (s *Store) readAll(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
	rows, err := s.pool.Query(ctx, readAllSQL, from.Commit, clampInt64(from.Prepare), max)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: read $all: %w", err)
	}
	evs, err := scanEvents(rows, max)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: read $all: %w", err)
	}
	return evs, nil
}

// scanEvents reads up to max events; room for them is made at the first
// (up to a bound), as a projection's replay reads full pages.
func scanEvents(rows pgx.Rows, max int) ([]eventstore.RecordedEvent, error) {
	defer rows.Close()
	var evs []eventstore.RecordedEvent
	for rows.Next() {
		if evs == nil {
			evs = make([]eventstore.RecordedEvent, 0, min(max, 4096))
		}
		var (
			e         eventstore.RecordedEvent
			seq, rev  int64
			data, mdt []byte
		)
		if err := rows.Scan(&e.Position.Commit, &seq, &e.ID, &e.StreamID, &rev, &e.Type,
			&e.SchemaVersion, &data, &mdt, &e.Hash, &e.RecordedAt); err != nil {
			return nil, err
		}
		e.Position.Prepare = uint64(seq)
		e.StreamRevision = uint64(rev)
		e.Data = data
		md, err := decodeMetadata(mdt)
		if err != nil {
			return nil, fmt.Errorf("event %s metadata: %w", e.ID, err)
		}
		e.Metadata = md
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
