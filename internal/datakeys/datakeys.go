// Package datakeys keeps the data keys that make erasure possible in an
// event log that never changes: every email's personal data (addresses,
// subject, bodies, attachments, feedback details) is encrypted with a key
// of its own, held here and not in the log. Destroying the key erases the
// data wherever its ciphertext lives: events, exports, backups, blobs.
//
// Keys are AES-256-GCM keys, stored wrapped under the master key in the
// data_keys table. A destroyed key leaves a tombstone row, so it can never
// be created again under the same id.
package datakeys

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/secretbox"
)

// ErrErased is returned for a key that was destroyed: the data it sealed is
// gone for good.
var ErrErased = errors.New("datakeys: the data key was destroyed")

// ErrNoKey is returned by Open for a key that was never created.
var ErrNoKey = errors.New("datakeys: no data key")

// ErrCannotOpen is returned for sealed data its key does not open: damaged,
// or sealed for another owner or context.
var ErrCannotOpen = errors.New("datakeys: cannot open sealed data (wrong key or context)")

// Key seals and opens one owner's data. The zero Key is an erased one.
//
// A Key holds its 32 raw bytes and builds its cipher on each use: that
// costs well under a microsecond, while a built AES-GCM cipher is several
// times the key's size, and a process keeps tens of thousands of keys.
type Key struct{ raw []byte }

// Erased reports whether the key was destroyed.
func (k Key) Erased() bool { return k.raw == nil }

func (k Key) aead() (cipher.AEAD, error) {
	if k.raw == nil {
		return nil, ErrErased
	}
	block, err := aes.NewCipher(k.raw)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts plain, bound to context (what the data is, e.g. the event
// type), so that a ciphertext cannot be moved elsewhere.
func (k Key) Seal(plain []byte, context string) ([]byte, error) {
	aead, err := k.aead()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	rand.Read(nonce)
	return aead.Seal(nonce, nonce, plain, []byte(context)), nil
}

// Open decrypts what Seal returned for the same context.
func (k Key) Open(sealed []byte, context string) ([]byte, error) {
	aead, err := k.aead()
	if err != nil {
		return nil, err
	}
	n := aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("%w: too short", ErrCannotOpen)
	}
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], []byte(context))
	if err != nil {
		return nil, ErrCannotOpen
	}
	return plain, nil
}

// newKey checks raw is a usable key.
func newKey(raw []byte) (Key, error) {
	k := Key{raw: raw}
	if _, err := k.aead(); err != nil {
		return Key{}, err
	}
	return k, nil
}

// How long a process keeps a live key in memory: a key destroyed by
// another process stops opening data here at most this long after.
const liveFor = time.Minute

// cacheSize bounds the keys held in memory.
const cacheSize = 65536

// Keyring is the data_keys table, with the keys this process used lately.
type Keyring struct {
	pool      *pgxpool.Pool
	box       *secretbox.Box
	sharesLog bool // the event log is in the same database

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	key     Key
	expires time.Time // zero for an erased key: erasure is final
}

// New returns the keyring of the database pool, whose keys are wrapped
// under box's master key.
func New(pool *pgxpool.Pool, box *secretbox.Box, opts ...Option) *Keyring {
	r := &Keyring{pool: pool, box: box, cache: map[string]cached{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Option configures a Keyring.
type Option func(*Keyring)

// SharesLog says the event log is kept in the keyring's own PostgreSQL
// database, so that a new key need not wait for its own flush (see
// ensureKeyUnflushed).
func SharesLog() Option { return func(r *Keyring) { r.sharesLog = true } }

func wrapContext(id string) string { return "datakey:" + id }

// Ensure returns the key of id, creating it for accountID when it does not
// exist. A destroyed key is ErrErased.
func (r *Keyring) Ensure(ctx context.Context, id, accountID string) (Key, error) {
	if k, ok := r.cached(id); ok {
		return orErased(k)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	var account *string
	if accountID != "" {
		account = &accountID
	}
	// The insert's row is not visible to the same statement's SELECT, so
	// at most one of the two branches answers. Neither does when another
	// transaction inserted the key after this statement's snapshot was
	// taken: the insert waited for it and did nothing, and the SELECT
	// cannot see it. The row is committed by then, so asking again finds it.
	//
	insert := ensureKey
	if r.sharesLog {
		insert = ensureKeyUnflushed
	}
	var wrapped *string
	var err error
	for range 3 {
		err = r.pool.QueryRow(ctx, insert, id, account, r.box.Seal(raw, wrapContext(id))).Scan(&wrapped)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return Key{}, fmt.Errorf("data key %s: %w", id, err)
	}
	k, err := r.unwrap(id, wrapped)
	if err != nil {
		return Key{}, err
	}
	r.remember(id, k)
	return orErased(k)
}

// ensureKey inserts key $1 unless it exists, and answers the one stored.
const ensureKey = `WITH ins AS (
		INSERT INTO data_keys (id, account_id, wrapped) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO NOTHING RETURNING wrapped)
	SELECT wrapped FROM ins UNION ALL SELECT wrapped FROM data_keys WHERE id = $1 LIMIT 1`

// ensureKeyUnflushed is ensureKey without waiting for the commit to reach
// the disk, for a keyring whose database also holds the event log: what a
// key seals becomes durable only with a later commit there (the event
// that holds the sealed data, or that names the sealed blobs), and that
// commit's flush takes this earlier one's WAL with it. A crash before then
// loses only a key that nothing recorded uses. With the log elsewhere the
// event could outlive the key, so there the insert waits.
const ensureKeyUnflushed = `WITH ins AS (
		INSERT INTO data_keys (id, account_id, wrapped)
		SELECT $1, $2, $3 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
		ON CONFLICT (id) DO NOTHING RETURNING wrapped)
	SELECT wrapped FROM ins UNION ALL SELECT wrapped FROM data_keys WHERE id = $1 LIMIT 1`

func orErased(k Key) (Key, error) {
	if k.Erased() {
		return Key{}, ErrErased
	}
	return k, nil
}

// Lookup returns the keys of ids that exist, live or erased (Key.Erased);
// an id without a key is absent from the answer.
func (r *Keyring) Lookup(ctx context.Context, ids ...string) (map[string]Key, error) {
	out := make(map[string]Key, len(ids))
	var missing []string
	asked := make(map[string]bool, len(ids))
	for _, id := range ids {
		if asked[id] {
			continue
		}
		asked[id] = true
		if k, ok := r.cached(id); ok {
			out[id] = k
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	rows, err := r.pool.Query(ctx, `SELECT id, wrapped FROM data_keys WHERE id = ANY($1)`, missing)
	if err != nil {
		return nil, fmt.Errorf("data keys: %w", err)
	}
	type row struct {
		id      string
		wrapped *string
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.wrapped)
	})
	if err != nil {
		return nil, fmt.Errorf("data keys: %w", err)
	}
	for _, f := range found {
		k, err := r.unwrap(f.id, f.wrapped)
		if err != nil {
			return nil, err
		}
		r.remember(f.id, k)
		out[f.id] = k
	}
	return out, nil
}

// Destroy erases the key of id for good, leaving a tombstone so that it is
// never created again. Destroying a destroyed or never created key is not
// an error.
func (r *Keyring) Destroy(ctx context.Context, id, accountID string) error {
	var account *string
	if accountID != "" {
		account = &accountID
	}
	_, err := r.pool.Exec(ctx, `INSERT INTO data_keys (id, account_id, wrapped, destroyed_at) VALUES ($1, $2, NULL, now())
		ON CONFLICT (id) DO UPDATE SET wrapped = NULL, destroyed_at = COALESCE(data_keys.destroyed_at, now())`, id, account)
	if err != nil {
		return fmt.Errorf("destroy data key %s: %w", id, err)
	}
	r.remember(id, Key{})
	return nil
}

// ErrWrongMasterKey means the master key opens none of the data keys
// already stored: it is not the key the database was used with.
var ErrWrongMasterKey = errors.New("the master key does not open this database's data keys")

// CheckMasterKey opens one stored data key, so that a process started with
// another master key stops at once with ErrWrongMasterKey, rather than
// failing on every email it reads. A database without data keys passes.
func (r *Keyring) CheckMasterKey(ctx context.Context) error {
	var id, wrapped string
	err := r.pool.QueryRow(ctx, `SELECT id, wrapped FROM data_keys WHERE wrapped IS NOT NULL LIMIT 1`).Scan(&id, &wrapped)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data keys: %w", err)
	}
	if _, err := r.box.Open(wrapped, wrapContext(id)); err != nil {
		return ErrWrongMasterKey
	}
	return nil
}

func (r *Keyring) unwrap(id string, wrapped *string) (Key, error) {
	if wrapped == nil {
		return Key{}, nil
	}
	raw, err := r.box.Open(*wrapped, wrapContext(id))
	if err != nil {
		return Key{}, fmt.Errorf("data key %s: %w", id, err)
	}
	return newKey(raw)
}

func (r *Keyring) cached(id string) (Key, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cache[id]
	if !ok {
		return Key{}, false
	}
	if !c.expires.IsZero() && time.Now().After(c.expires) {
		delete(r.cache, id)
		return Key{}, false
	}
	return c.key, true
}

func (r *Keyring) remember(id string, k Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.cache[id]; ok && old.key.Erased() {
		return // erasure is final: a read that raced with it cannot undo it
	}
	if len(r.cache) >= cacheSize {
		clear(r.cache)
	}
	c := cached{key: k}
	if !k.Erased() {
		c.expires = time.Now().Add(liveFor)
	}
	r.cache[id] = c
}

// Rewrap wraps every live data key (and the address keys' secret) under
// the current master key, so that a previous one can be retired. Keys
// destroyed meanwhile stay destroyed. It reports how many it rewrapped and
// how many were under the current key already.
func (r *Keyring) Rewrap(ctx context.Context) (rewrapped, current int, err error) {
	after := ""
	for {
		rows, err := r.pool.Query(ctx, `SELECT id, wrapped FROM data_keys WHERE wrapped IS NOT NULL AND id > $1 ORDER BY id LIMIT 1000`, after)
		if err != nil {
			return rewrapped, current, fmt.Errorf("data keys: %w", err)
		}
		type row struct{ id, wrapped string }
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.wrapped)
		})
		if err != nil {
			return rewrapped, current, fmt.Errorf("data keys: %w", err)
		}
		if len(page) == 0 {
			return rewrapped, current, nil
		}
		for _, k := range page {
			resealed, changed, err := r.box.Reseal(k.wrapped, wrapContext(k.id))
			if err != nil {
				return rewrapped, current, fmt.Errorf("data key %s: %w", k.id, err)
			}
			if !changed {
				current++
				continue
			}
			// Only the value read: a key destroyed meanwhile stays so.
			tag, err := r.pool.Exec(ctx, `UPDATE data_keys SET wrapped = $3 WHERE id = $1 AND wrapped = $2`, k.id, k.wrapped, resealed)
			if err != nil {
				return rewrapped, current, fmt.Errorf("data key %s: %w", k.id, err)
			}
			rewrapped += int(tag.RowsAffected())
		}
		after = page[len(page)-1].id
	}
}
