// Package pglock holds every PostgreSQL advisory lock the module takes, and
// the one way it holds a session lock: on a connection of its own, for as
// long as that connection is seen to live.
//
// The values are shared with processes of older releases running side by
// side during a rolling upgrade: changing one breaks mutual exclusion with
// them, so they never change.
package pglock

import "hash/fnv"

// Key is a single-bigint advisory lock id.
type Key int64

// The fixed session locks.
const (
	// Migrations serialises schema migrations across processes.
	Migrations Key = 7261001
	// DomainPoll lets one process at a time re-check pending domains and
	// DKIM key changes.
	DomainPoll Key = 7261002
	// WebhookSweep lets one process at a time expire held webhook
	// deliveries and queue due ones again.
	WebhookSweep Key = 7261003
	// SESFeedback lets one process at a time poll the SES feedback queue.
	SESFeedback Key = 7261004
	// Retention lets one process at a time erase emails past their
	// account's retention.
	Retention Key = 7261005
)

// StreamClass is the first key of the two-key transaction lock that
// serialises appends to one stream; the second is hashtext(stream). Two-key
// locks never collide with Key ones.
const StreamClass int32 = 0x6d726576 // "mrev"

// ProcessManager is the session lock of the process manager called name,
// held by the one process reading the log for it.
func ProcessManager(name string) Key { return named("processmanager:" + name) }

// Projection is the transaction lock guarding the writes of the projector
// called name: its batches, quarantines and the swap of a rebuild.
func Projection(name string) Key { return named("projection:" + name) }

// Rebuild is the session lock letting one rebuild of the projector called
// name run at a time.
func Rebuild(name string) Key { return Projection("rebuild:" + name) }

// RiverClient is the session lock a worker process holds while it lives,
// named after its River client id; a free one means the process is gone.
func RiverClient(id string) Key { return named("river-client:" + id) }

// named derives a key from a name: the FNV-1a 64-bit hash of it.
func named(s string) Key {
	h := fnv.New64a()
	h.Write([]byte(s))
	return Key(h.Sum64())
}
