// Package projections builds the PostgreSQL read models from the event log.
//
// Each Projector owns a set of tables, declared by its DDL, and turns events
// into SQL statements. The Runner applies a batch of events and advances the
// projector's checkpoint in one transaction, so every event takes effect
// exactly once even across crashes. Rebuild replays the whole log into shadow
// tables in a schema of their own and swaps them in at the end, while the live
// tables keep serving reads.
package projections

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Name identifies a projector and its checkpoint. A write names the
// projectors whose read models it waits for.
type Name string

// The projectors' names.
const (
	AccountsName Name = "accounts"
	APIKeysName  Name = "api_keys"
	DomainsName  Name = "domains"
	EmailsName   Name = "emails"
	WebhooksName Name = "webhooks"
)

// Names lists every projector's name.
var Names = []Name{AccountsName, APIKeysName, DomainsName, EmailsName, WebhooksName}

// Projector turns events into read-model rows.
type Projector interface {
	// Name identifies the projector and its checkpoint.
	Name() Name
	// Version changes whenever Schema or the meaning of Apply changes; a
	// projector found at an older version is rebuilt on start.
	Version() int
	// Tables lists the tables Schema creates, all of them owned by this
	// projector and moved together by a rebuild.
	Tables() []string
	// Schema returns idempotent DDL with unqualified table names; it is run
	// with the search path set to the target schema.
	Schema() string
	// Apply queues the statements that project ev. Statements run in order
	// in the batch's transaction (SQL may read what earlier ones wrote; Go
	// code cannot) and must be idempotent.
	Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error
}

// TxProjector is a projector that must read before it writes: it applies
// each event directly in the batch's transaction instead of queueing
// statements. Meant for low-volume streams whose view is folded in Go.
type TxProjector interface {
	Projector
	ApplyTx(ctx context.Context, tx pgx.Tx, ev eventstore.RecordedEvent) error
}

// BatchProjector is a projector that can apply a whole batch with
// set-based statements (each touched row written once) instead of a few
// statements per event. The runner uses ApplyBatch for a batch and falls
// back to Apply event by event when the batch is refused, to find the event
// at fault.
type BatchProjector interface {
	Projector
	// ApplyBatch queues statements leaving the read model as Apply of each
	// event in turn would. An error names the event it failed on.
	ApplyBatch(events []eventstore.RecordedEvent, b *pgx.Batch) error
}

// Filter is a projector that tells, without a transaction, which events it
// reads: Reads must be true of every event Apply or ApplyTx acts on (it may
// be true of others). A runner passes a batch it reads nothing of with its
// checkpoint moved, and nothing else.
type Filter interface {
	Reads(ev eventstore.RecordedEvent) bool
}

// IndexedProjector is a projector whose secondary indexes are declared
// apart from its tables, so that a rebuild creates them once the replay is
// done: building an index over a full table is far cheaper than keeping it
// up to date row by row. Indexes that statements rely on while projecting
// (keys for ON CONFLICT, lookups) stay in Schema.
type IndexedProjector interface {
	Projector
	// Indexes returns one CREATE INDEX IF NOT EXISTS statement per
	// secondary index, over unqualified table names, run like Schema. A
	// rebuild runs them one after another, CONCURRENTLY. An index that
	// needs an extension ext does not name is left out.
	Indexes(ext Extensions) []string
}

// Extensions names the schema of each extension installed in the
// database, for index statements that name an extension's operator class.
type Extensions map[string]string

// installedExtensions reads the database's extensions.
func installedExtensions(ctx context.Context, q querier) (Extensions, error) {
	ext := Extensions{}
	err := q.QueryRow(ctx, `SELECT coalesce(jsonb_object_agg(e.extname, n.nspname), '{}')
		FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace`).Scan(&ext)
	return ext, err
}

// ddl is all of p's DDL: its tables and then their indexes.
func ddl(p Projector, ext Extensions) string {
	if ip, ok := p.(IndexedProjector); ok {
		return p.Schema() + ";\n" + strings.Join(ip.Indexes(ext), ";\n")
	}
	return p.Schema()
}

// All is every projector Mailroom runs; keys compute the address keys of
// events recorded before they carried them.
func All(keys datakeys.AddressKeys) []Projector {
	return []Projector{Accounts{}, APIKeys{}, Domains{}, Emails{Keys: keys}, Webhooks{}}
}
