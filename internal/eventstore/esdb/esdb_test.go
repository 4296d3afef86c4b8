package esdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	client "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/contract"
	"github.com/mailroom/mailroom/internal/eventstore/esdb"
	"github.com/mailroom/mailroom/internal/eventstore/esdb/esdbfake"
)

// liveEnv names a real EventStoreDB/KurrentDB to run the suite against.
const liveEnv = "MAILROOM_TEST_ESDB_URL"

func startFake(t *testing.T) *esdbfake.Server {
	t.Helper()
	srv, err := esdbfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func open(t *testing.T, conn string) *esdb.Store {
	t.Helper()
	s, err := esdb.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func rawClient(t *testing.T, conn string) *client.Client {
	t.Helper()
	cfg, err := client.ParseConnectionString(conn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = client.NoopLogging()
	c, err := client.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// targets are the servers the shared tests run against: the fake always,
// a real server when liveEnv is set.
func targets(t *testing.T) map[string]string {
	out := map[string]string{"Fake": startFake(t).ConnectionString()}
	if url := os.Getenv(liveEnv); url != "" {
		out["Live"] = url
	}
	return out
}

func TestContractFake(t *testing.T) {
	srv := startFake(t)
	contract.Run(t, func(t *testing.T) eventstore.Store { return open(t, srv.ConnectionString()) })
}

func TestContractLive(t *testing.T) {
	url := os.Getenv(liveEnv)
	if url == "" {
		t.Log("MAILROOM_TEST_ESDB_URL not set; live EventStoreDB test not run")
		return
	}
	s := open(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("%s=%s: %v", liveEnv, url, err)
	}
	contract.Run(t, func(t *testing.T) eventstore.Store { return open(t, url) })
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newEvent(typ string, n int) eventstore.EventData {
	return eventstore.EventData{
		ID: uuid.New(), Type: typ, SchemaVersion: 1,
		Data:     json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
		Metadata: eventstore.Metadata{Actor: "system:test"},
	}
}

func category() string { return "esdbtest" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") }

// nextOwn returns the next event of category cat, failing on any repeat or
// step backwards.
func nextOwn(t *testing.T, ctx context.Context, sub eventstore.Subscription, cat string, last *eventstore.Position) eventstore.RecordedEvent {
	t.Helper()
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if !last.Less(e.Position) {
			t.Fatalf("got %s after %s", e.Position, *last)
		}
		*last = e.Position
		if strings.HasPrefix(e.Type, "$") || strings.HasPrefix(e.StreamID, "$") {
			t.Fatalf("system event delivered: %s in %s", e.Type, e.StreamID)
		}
		if strings.HasPrefix(e.StreamID, cat+"-") {
			return e
		}
	}
}

// TestSystemEventsExcluded writes system events next to ours with the raw
// client: ReadAll and SubscribeAll must skip them.
func TestSystemEventsExcluded(t *testing.T) {
	for name, conn := range targets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			s := open(t, conn)
			raw := rawClient(t, conn)
			cat := category()
			st := cat + "-1"

			marker, err := s.Append(ctx, st, eventstore.NoStream, newEvent("Marker", 0))
			if err != nil {
				t.Fatal(err)
			}
			var meta client.StreamMetadata
			meta.SetMaxAge(time.Hour)
			if _, err := raw.SetStreamMetadata(ctx, st, client.AppendToStreamOptions{}, meta); err != nil { // "$metadata" in "$$stream"
				t.Fatal(err)
			}
			if _, err := raw.AppendToStream(ctx, st, client.AppendToStreamOptions{}, client.EventData{
				EventType: "$system-looking", ContentType: client.ContentTypeJson, Data: []byte(`{}`),
			}); err != nil {
				t.Fatal(err)
			}
			want, err := s.Append(ctx, st, eventstore.Exact(1), newEvent("After", 1))
			if err != nil {
				t.Fatal(err)
			}

			evs, err := s.ReadAll(ctx, marker.Position, 1000)
			if err != nil {
				t.Fatal(err)
			}
			var own []eventstore.RecordedEvent
			for _, e := range evs {
				if strings.HasPrefix(e.Type, "$") || strings.HasPrefix(e.StreamID, "$") {
					t.Fatalf("ReadAll returned system event %s in %s", e.Type, e.StreamID)
				}
				if e.StreamID == st {
					own = append(own, e)
				}
			}
			if len(own) != 1 || own[0].Position != want.Position {
				t.Fatalf("ReadAll after the marker: %d own events, want the one at %s", len(own), want.Position)
			}

			sub, err := s.SubscribeAll(ctx, marker.Position)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			last := marker.Position
			if e := nextOwn(t, ctx, sub, cat, &last); e.Type != "After" || e.Position != want.Position {
				t.Fatalf("subscription: got %s at %s, want After at %s", e.Type, e.Position, want.Position)
			}
		})
	}
}

// TestSubscriptionSurvivesDrop ends the server side of every subscription:
// the store resubscribes after the last event it delivered.
func TestSubscriptionSurvivesDrop(t *testing.T) {
	srv := startFake(t)
	s := open(t, srv.ConnectionString())
	ctx := testContext(t)
	cat := category()

	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	last := eventstore.Start
	var ids []uuid.UUID
	appendN := func(from, n int) {
		for i := from; i < from+n; i++ {
			ev := newEvent("Tick", i)
			if _, err := s.Append(ctx, fmt.Sprintf("%s-%d", cat, i%2), eventstore.Any, ev); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ev.ID)
		}
	}
	expect := func(from, to int) {
		for i := from; i < to; i++ {
			if e := nextOwn(t, ctx, sub, cat, &last); e.ID != ids[i] {
				t.Fatalf("event %d: got %s, want %s", i, e.ID, ids[i])
			}
		}
	}

	appendN(0, 3)
	expect(0, 3)
	for round := 0; round < 3; round++ {
		srv.DropSubscriptions()
		appendN(len(ids), 3)
		expect(len(ids)-3, len(ids))
	}
}

// TestReconnectAfterServerRestart stops the server (every connection drops),
// lets a call fail during the outage, restarts it on the same address, and
// expects appends to work again and the subscription to resume without a
// gap or a repeat.
func TestReconnectAfterServerRestart(t *testing.T) {
	srv := startFake(t)
	s := open(t, srv.ConnectionString())
	ctx := testContext(t)
	cat := category()
	st := cat + "-1"

	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	last := eventstore.Start
	before := newEvent("Before", 0)
	if _, err := s.Append(ctx, st, eventstore.NoStream, before); err != nil {
		t.Fatal(err)
	}
	if e := nextOwn(t, ctx, sub, cat, &last); e.ID != before.ID {
		t.Fatalf("got %s, want %s", e.ID, before.ID)
	}

	srv.Stop()
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = s.Append(octx, st, eventstore.Exact(0), newEvent("During", 1))
	cancel()
	if err == nil {
		t.Fatal("append succeeded while the server was down")
	}
	if eventstore.IsConflict(err) {
		t.Fatalf("append during the outage: %v", err)
	}
	time.Sleep(2 * time.Second) // long enough for the client to give up on discovery
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}

	after := []eventstore.EventData{newEvent("After", 2), newEvent("After", 3)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.Append(ctx, st, eventstore.Exact(0), after...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("append after the restart: %v", err)
		}
		t.Logf("append after the restart: %v (retrying)", err)
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range after {
		if e := nextOwn(t, ctx, sub, cat, &last); e.ID != want.ID {
			t.Fatalf("after the restart got %s (%s), want %s", e.ID, e.Type, want.ID)
		}
	}
	if evs, err := s.ReadStream(ctx, st, 0, 10); err != nil || len(evs) != 3 {
		t.Fatalf("stream after the restart: %d events, err %v", len(evs), err)
	}
}

func TestClosedStore(t *testing.T) {
	srv := startFake(t)
	s, err := esdb.New(srv.ConnectionString())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, esdb.ErrClosed) {
		t.Fatalf("Next after the store closed: %v, want ErrClosed", err)
	}
	if _, err := s.Append(ctx, category()+"-1", eventstore.Any, newEvent("E", 0)); !errors.Is(err, esdb.ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
	if _, err := s.SubscribeAll(ctx, eventstore.Start); !errors.Is(err, esdb.ErrClosed) {
		t.Fatalf("SubscribeAll after Close: %v, want ErrClosed", err)
	}
}

func TestNewRejectsBadConnectionString(t *testing.T) {
	if _, err := esdb.New("http://[::1"); err == nil {
		t.Fatal("New accepted a malformed connection string")
	}
}

// TestCloseReleasesGoroutines checks that a closed store leaves nothing
// running: subscriptions, their readers and the client connection.
func TestCloseReleasesGoroutines(t *testing.T) {
	srv := startFake(t)
	ctx := testContext(t)
	settle := func(limit int) int {
		n := runtime.NumGoroutine()
		for end := time.Now().Add(5 * time.Second); n > limit && time.Now().Before(end); n = runtime.NumGoroutine() {
			time.Sleep(20 * time.Millisecond)
		}
		return n
	}
	time.Sleep(50 * time.Millisecond) // let the server's goroutines start
	base := runtime.NumGoroutine()
	s, err := esdb.New(srv.ConnectionString())
	if err != nil {
		t.Fatal(err)
	}
	cat := category()
	for i := 0; i < 3; i++ {
		sub, err := s.SubscribeAll(ctx, eventstore.Start)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, fmt.Sprintf("%s-%d", cat, i), eventstore.NoStream, newEvent("E", i)); err != nil {
			t.Fatal(err)
		}
		last := eventstore.Start
		nextOwn(t, ctx, sub, cat, &last)
		if i == 0 {
			sub.Close() // the others stay open until the store closes
		}
	}
	s.Close()
	if n := settle(base); n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Close, %d before New:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
