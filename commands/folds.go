package commands

import (
	"reflect"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// folds keeps, between commands, the state of the streams that grow with
// a tenant's use, have no cap, and are read by frequent commands: a webhook
// endpoint (two events per event its receiver refuses), an account's
// endpoint slots, a sending domain's checks. Without it every command on
// such a stream reads and decodes its whole history, half a second after a
// year of a receiver refusing a hundred events a day; with it, only what
// was appended since the last command here.
//
// Events are never changed or removed, so the state folded from a stream's
// first n events stays right: a load goes on reading from revision n, and
// an append still names the revision it decided on, so another process's
// writes are seen or conflict as before. Evolve functions never change a
// state in place, so one kept state may start several loads at once
// (TestAKeptStateIsNotChangedByWhatIsFoldedOrDecidedOnIt). Email and
// delivery streams are not kept: they are short (an email records at most
// a thousand opens and clicks) and carry personal data, which an erasure
// must take out of memory as well as out of the log. Accounts are not kept
// either: their state holds every token they issued, so it would grow with
// their history, and the commands that read it are an operator's (ten
// years of a token a day load in about 60 ms).
type folds struct {
	kept *lru.Cache[foldKey, folded]
}

// foldKey names a stream folded into one state type.
type foldKey struct {
	stream string
	state  reflect.Type
}

// folded is a stream's state after its events up to a revision.
type folded struct {
	state       any
	expected    eventstore.ExpectedVersion
	first, last eventstore.Position
	next        uint64 // the revision a load reads from
}

const (
	// foldsKept bounds the states a process keeps. None grows with its
	// stream: an endpoint's holds its current failure run (the run stops
	// at the 20th, give or take the deliveries in flight), the slots the
	// account's endpoints, a domain's its last check; a few KiB at most.
	foldsKept = 4096
	// keepAfter is the length from which a stream's state is kept: below
	// it, a load costs a few milliseconds and one read.
	keepAfter = 500
)

func newFolds() *folds {
	kept, err := lru.New[foldKey, folded](foldsKept)
	if err != nil {
		panic(err) // only for a size below one
	}
	return &folds{kept: kept}
}

// keeps reports whether streams folded into S are kept: the aggregates
// named above.
func keeps[S any]() bool {
	switch any(*new(S)).(type) {
	case webhook.State, webhook.Slots, sendingdomain.State:
		return true
	}
	return false
}

// foldedFrom returns the kept state of stream folded into S, if any.
func foldedFrom[S any](f *folds, stream string) (folded, bool) {
	if f == nil || !keeps[S]() {
		return folded{}, false
	}
	return f.kept.Get(foldKey{stream, reflect.TypeFor[S]()})
}

// keep records stream's state after a load, once the stream is long.
func keep[S any](f *folds, stream string, fd folded) {
	if f == nil || fd.next < keepAfter || !keeps[S]() {
		return
	}
	key := foldKey{stream, reflect.TypeFor[S]()}
	if old, ok := f.kept.Peek(key); ok && old.next >= fd.next {
		return // a load that read further got here first
	}
	f.kept.Add(key, fd)
}
