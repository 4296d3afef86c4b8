package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
)

func benchEvent() eventstore.EventData {
	return eventstore.EventData{
		ID: uuid.New(), Type: "EmailQueued", SchemaVersion: 1,
		Data:     json.RawMessage(`{"from":"news@example.com","to":["a@example.org"],"subject":"Hello","size":2048}`),
		Metadata: eventstore.Metadata{CorrelationID: "c", CausationID: "k", Actor: "apikey:bench", RequestID: "r"},
	}
}

// BenchmarkAppendSingle: one goroutine, one event per append, each to a new
// stream.
func BenchmarkAppendSingle(b *testing.B) {
	s := newStore(b, pgtest.NewPool(b))
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		if _, err := s.Append(ctx, fmt.Sprintf("email-%d", i), eventstore.NoStream, benchEvent()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendConcurrent: appends from GOMAXPROCS goroutines (bounded by
// the pool size), each to a new stream.
func BenchmarkAppendConcurrent(b *testing.B) {
	s := newStore(b, pgtest.NewPool(b))
	ctx := context.Background()
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Append(ctx, fmt.Sprintf("email-%d", n.Add(1)), eventstore.NoStream, benchEvent()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReadAll: each op reads one page of up to 1000 events of a 20,000
// event log, carrying on where the previous page ended and wrapping around.
func BenchmarkReadAll(b *testing.B) {
	const events, page = 20000, 1000
	s := newStore(b, pgtest.NewPool(b))
	ctx := context.Background()
	for i := 0; i < events/100; i++ {
		batch := make([]eventstore.EventData, 100)
		for j := range batch {
			batch[j] = benchEvent()
		}
		if _, err := s.Append(ctx, fmt.Sprintf("email-%d", i), eventstore.NoStream, batch...); err != nil {
			b.Fatal(err)
		}
	}
	waitVisible(b, s, events)
	pos, read := eventstore.Start, 0
	for b.Loop() {
		// The query itself: ReadAll would answer these pages from the
		// window of recent events that waitVisible's read opened.
		evs, err := s.readAll(ctx, pos, page)
		if err != nil {
			b.Fatal(err)
		}
		read += len(evs)
		if len(evs) < page {
			pos = eventstore.Start
		} else {
			pos = evs[len(evs)-1].Position
		}
	}
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "events/s")
}
