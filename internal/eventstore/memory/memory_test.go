package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/contract"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
)

func newStore(t *testing.T) *memory.Store {
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T) eventstore.Store { return newStore(t) })
}

func event(typ string) eventstore.EventData {
	return eventstore.EventData{ID: uuid.New(), Type: typ, SchemaVersion: 1, Data: json.RawMessage(`{}`)}
}

func TestCountAfter(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	first, err := s.Append(ctx, "a-1", eventstore.NoStream, event("E"), event("E"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "a-2", eventstore.NoStream, event("E")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from  eventstore.Position
		limit int64
		want  int64
	}{
		{eventstore.Start, 0, 3},
		{eventstore.Start, 2, 2},
		{first.Position, 0, 1},
	} {
		if n, err := s.CountAfter(ctx, c.from, c.limit); err != nil || n != c.want {
			t.Errorf("count after %s limit %d = %d, %v; want %d", c.from, c.limit, n, err, c.want)
		}
	}
}

func TestStoredEventsAreTheStoresOwn(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	ev := eventstore.EventData{ID: uuid.New(), Type: "E", Data: json.RawMessage(`{"n":1}`)}
	if _, err := s.Append(ctx, "a-1", eventstore.NoStream, ev); err != nil {
		t.Fatal(err)
	}
	ev.Data[5] = '2' // the caller reuses its buffer
	evs, err := s.ReadStream(ctx, "a-1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	evs[0].Data[5] = '3' // a reader changes what it read
	again, err := s.ReadStream(ctx, "a-1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(again[0].Data); got != `{"n":1}` {
		t.Fatalf("stored data %s, want {\"n\":1}", got)
	}
}

func TestCloseEndsSubscriptionsAndCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := memory.New()
	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := sub.Next(ctx)
		errc <- err
	}()
	s.Close()
	if err := <-errc; !errors.Is(err, memory.ErrClosed) {
		t.Fatalf("waiting Next after the store closed: %v, want ErrClosed", err)
	}
	if _, err := s.Append(ctx, "a-1", eventstore.Any, event("E")); !errors.Is(err, memory.ErrClosed) {
		t.Fatalf("append after close: %v, want ErrClosed", err)
	}
	if _, err := s.SubscribeAll(ctx, eventstore.Start); !errors.Is(err, memory.ErrClosed) {
		t.Fatalf("subscribe after close: %v, want ErrClosed", err)
	}
}
