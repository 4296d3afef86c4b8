package postgres

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
)

// head is a stream's last revision and the hash of its last event, as this
// store last read or wrote them.
type head struct {
	revision uint64
	hash     string
}

// heads remembers the heads of the streams this store read to their end or
// appended to, so that an append at the revision a command just read (the
// usual case: load, decide, append) needs no read of the head first. A
// remembered head is only a guess: the append checks it in the database and
// falls back to reading the head when it is stale.
type heads struct {
	limit int

	mu    sync.Mutex
	known map[string]head
	order []string // the streams in the order they were added, for eviction
}

func newHeads(limit int) *heads { return &heads{limit: limit, known: map[string]head{}} }

func (h *heads) get(stream string) (head, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.known[stream]
	return v, ok
}

func (h *heads) put(stream string, v head) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.known[stream]; !ok {
		h.order = append(h.order, stream)
	}
	h.known[stream] = v
	if over := len(h.order) - h.limit; over > h.limit/2 {
		// The oldest go in large steps, so a put costs little.
		for _, s := range h.order[:over] {
			delete(h.known, s)
		}
		h.order = append([]string(nil), h.order[over:]...)
	}
}

func (h *heads) forget(stream string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.known, stream) // its place in order goes with the next eviction
}

// appendAtHead appends p, whose expected revision is the remembered head
// h, in one round trip: BEGIN, the stream's lock, one statement that moves
// the head only if it is still h and inserts the events only if it moved,
// and COMMIT. It reports ok false, having written nothing, when the head
// was not h; the caller then appends the ordinary way.
func (s *Store) appendAtHead(ctx context.Context, p eventstore.StreamAppend, h head) (eventstore.AppendResult, string, bool, error) {
	next := h.revision + 1
	rows, err := rowsOf(p, next, h.hash)
	if err != nil {
		return eventstore.AppendResult{}, "", false, err
	}
	last := next + uint64(len(p.Events)) - 1

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return eventstore.AppendResult{}, "", false, fmt.Errorf("eventstore/postgres: acquire: %w", err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	b.Queue("SELECT pg_advisory_xact_lock($1, hashtext($2))", pglock.StreamClass, p.Stream)
	b.Queue(`WITH moved AS (
			UPDATE streams SET last_revision = $9, last_hash = $10
			WHERE stream_id = $2 AND last_revision = $11 AND last_hash = $12
			RETURNING 1)
		INSERT INTO events (event_id, stream_id, stream_revision, event_type, schema_version, data, metadata, hash)
		SELECT e.id, $2, $3 + e.n - 1, e.typ, e.ver, e.data::json, e.meta::json, e.hash
		FROM unnest($1::uuid[], $4::text[], $5::integer[], $6::text[], $7::text[], $8::text[])
			WITH ORDINALITY AS e(id, typ, ver, data, meta, hash, n)
		WHERE EXISTS (SELECT 1 FROM moved)
		ORDER BY e.n
		RETURNING transaction_id, seq`,
		append(rows.args(p.Stream, next), int64(last), rows.lastHash(), int64(h.revision), h.hash)...)
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	var pos eventstore.Position
	inserted := 0
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			for rows.Next() {
				var ev eventstore.Position
				var seq int64
				if err = rows.Scan(&ev.Commit, &seq); err != nil {
					break
				}
				inserted++
				if ev.Prepare = uint64(seq); pos.Less(ev) {
					pos = ev
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if err == nil {
		_, err = br.Exec() // COMMIT
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	endOpenTx(ctx, conn)
	if err != nil {
		return eventstore.AppendResult{}, "", false, fmt.Errorf("eventstore/postgres: append to %s: %w", p.Stream, err)
	}
	if inserted == 0 {
		return eventstore.AppendResult{}, "", false, nil // the head moved: nothing was written
	}
	return eventstore.AppendResult{NextRevision: last, Position: pos}, rows.lastHash(), true, nil
}
