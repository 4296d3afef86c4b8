package esdb

import (
	"errors"
	"math"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/mailroom/mailroom/internal/eventstore"
)

func TestPositionFillsUnknownHalf(t *testing.T) {
	for _, c := range []struct {
		in   esdb.Position
		want eventstore.Position
	}{
		{esdb.Position{Commit: 42, Prepare: 42}, eventstore.Position{Commit: 42, Prepare: 42}},
		{esdb.Position{Commit: math.MaxUint64, Prepare: 42}, eventstore.Position{Commit: 42, Prepare: 42}},
		{esdb.Position{Commit: 42, Prepare: math.MaxUint64}, eventstore.Position{Commit: 42, Prepare: 42}},
		{esdb.Position{Commit: 0, Prepare: 42}, eventstore.Position{Commit: 42, Prepare: 42}},
		{esdb.Position{Commit: 50, Prepare: 42}, eventstore.Position{Commit: 50, Prepare: 42}}, // explicit transaction
	} {
		if got := position(c.in); got != c.want {
			t.Errorf("position(%+v) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestActualRevisionFromClientError(t *testing.T) {
	for msg, want := range map[string]struct {
		rev        uint64
		exists, ok bool
	}{
		"wrong expected version: expecting '3' but got '5'":           {5, true, true},
		"wrong expected version: expecting 'any' but got 'no_stream'": {0, false, true},
		"wrong expected version: expecting '3' but got 'what'":        {0, false, false},
		"something else": {0, false, false},
	} {
		e, _ := esdb.FromError(errors.New(msg))
		rev, exists, ok := actualRevision(e)
		if rev != want.rev || exists != want.exists || ok != want.ok {
			t.Errorf("%q: got %d %v %v, want %+v", msg, rev, exists, ok, want)
		}
	}
}

func TestPermanentErrors(t *testing.T) {
	if permanent(errors.New("connection reset")) {
		t.Error("a plain error is permanent")
	}
	if permanent(nil) {
		t.Error("nil is permanent")
	}
}
