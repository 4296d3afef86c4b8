package esdbfake_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/mailroom/mailroom/internal/eventstore/esdb/esdbfake"
)

// These tests drive the fake with the real client directly, for the parts
// of the protocol the adapter's contract tests do not reach.

func setup(t *testing.T, conn func(*esdbfake.Server) string) (*esdbfake.Server, *esdb.Client, context.Context) {
	t.Helper()
	srv, err := esdbfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if conn == nil {
		conn = (*esdbfake.Server).ConnectionString
	}
	cfg, err := esdb.ParseConnectionString(conn(srv))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = esdb.NoopLogging()
	c, err := esdb.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return srv, c, ctx
}

func appendN(t *testing.T, ctx context.Context, c *esdb.Client, stream, typ string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{}, esdb.EventData{
			EventType: typ, ContentType: esdb.ContentTypeJson, Data: []byte(fmt.Sprintf(`{"i":%d}`, i)),
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// collect reads a read's events to the end: collect(t)(c.ReadStream(...)).
func collect(t *testing.T) func(*esdb.ReadStream, error) []*esdb.RecordedEvent {
	return func(rs *esdb.ReadStream, err error) []*esdb.RecordedEvent {
		t.Helper()
		return drain(t, rs, err)
	}
}

func drain(t *testing.T, rs *esdb.ReadStream, err error) []*esdb.RecordedEvent {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []*esdb.RecordedEvent
	for {
		ev, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.OriginalEvent())
	}
}

func TestReadsBothWays(t *testing.T) {
	_, c, ctx := setup(t, nil)
	appendN(t, ctx, c, "a-1", "A", 3)
	appendN(t, ctx, c, "b-1", "B", 2)

	back := collect(t)(c.ReadStream(ctx, "a-1", esdb.ReadStreamOptions{From: esdb.End{}, Direction: esdb.Backwards}, 2))
	if len(back) != 2 || back[0].EventNumber != 2 || back[1].EventNumber != 1 {
		t.Fatalf("a-1 backwards from the end: %d events", len(back))
	}
	if back[0].CreatedDate.IsZero() || back[0].ContentType != "application/json" {
		t.Fatalf("system metadata %v", back[0].SystemMetadata)
	}
	all := collect(t)(c.ReadAll(ctx, esdb.ReadAllOptions{From: esdb.End{}, Direction: esdb.Backwards}, 10))
	if len(all) != 5 || all[0].StreamID != "b-1" || all[0].Position.Commit != 5 {
		t.Fatalf("$all backwards: %d events, first %+v", len(all), all[0])
	}
	from := all[2].Position // a-1@2
	fwd := collect(t)(c.ReadAll(ctx, esdb.ReadAllOptions{From: from, Direction: esdb.Forwards}, 10))
	if len(fwd) != 3 || fwd[0].Position != from {
		t.Fatalf("$all forwards from %v: %d events (a read includes its start)", from, len(fwd))
	}
	rs, err := c.ReadStream(ctx, "missing-1", esdb.ReadStreamOptions{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, err := rs.Recv(); err == nil {
		t.Fatal("reading a missing stream returned an event")
	} else if e, _ := esdb.FromError(err); e.Code() != esdb.ErrorCodeResourceNotFound {
		t.Fatalf("reading a missing stream: %v", err)
	}
}

func TestStreamSubscription(t *testing.T) {
	_, c, ctx := setup(t, nil)
	appendN(t, ctx, c, "s-1", "E", 3)
	appendN(t, ctx, c, "other-1", "E", 1)
	sub, err := c.SubscribeToStream(ctx, "s-1", esdb.SubscribeToStreamOptions{From: esdb.Revision(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []uint64
	for len(got) < 4 {
		ev := sub.Recv()
		switch {
		case ev.SubscriptionDropped != nil:
			t.Fatal(ev.SubscriptionDropped.Error)
		case ev.EventAppeared != nil:
			e := ev.EventAppeared.OriginalEvent()
			if e.StreamID != "s-1" {
				t.Fatalf("event of %s in a subscription to s-1", e.StreamID)
			}
			got = append(got, e.EventNumber)
		case ev.CaughtUp != nil:
			appendN(t, ctx, c, "s-1", "E", 2) // revisions 3 and 4
		}
	}
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("revisions %v, want [1 2 3 4] (strictly after revision 0)", got)
	}
}

func TestFilteredSubscriptionSendsCheckpoints(t *testing.T) {
	_, c, ctx := setup(t, nil)
	appendN(t, ctx, c, "keep-1", "E", 1)
	appendN(t, ctx, c, "skip-1", "E", 10)
	appendN(t, ctx, c, "keep-2", "E", 1)
	sub, err := c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{
		From:            esdb.Start{},
		Filter:          &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"keep-"}},
		MaxSearchWindow: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var streams []string
	checkpoints := 0
	for len(streams) < 2 {
		ev := sub.Recv()
		switch {
		case ev.SubscriptionDropped != nil:
			t.Fatal(ev.SubscriptionDropped.Error)
		case ev.EventAppeared != nil:
			streams = append(streams, ev.EventAppeared.OriginalEvent().StreamID)
		case ev.CheckPointReached != nil:
			checkpoints++
		}
	}
	// keep-2 is the 12th event: checkpoints at the 4th and 8th come before it.
	if fmt.Sprint(streams) != "[keep-1 keep-2]" || checkpoints != 2 {
		t.Fatalf("streams %v, %d checkpoints; want [keep-1 keep-2] and 2 (one every 4 events)", streams, checkpoints)
	}
}

func TestDiscoveryThroughGossip(t *testing.T) {
	_, c, ctx := setup(t, func(s *esdbfake.Server) string {
		return "esdb+discover://" + s.Addr() + "?tls=false&maxDiscoverAttempts=2"
	})
	appendN(t, ctx, c, "g-1", "E", 1)
	if evs := collect(t)(c.ReadStream(ctx, "g-1", esdb.ReadStreamOptions{}, 10)); len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
}

func TestUnsupportedCallsAreUnimplemented(t *testing.T) {
	_, c, ctx := setup(t, nil)
	appendN(t, ctx, c, "d-1", "E", 1)
	_, err := c.DeleteStream(ctx, "d-1", esdb.DeleteStreamOptions{})
	var e *esdb.Error
	if !errors.As(err, &e) || e.Code() != esdb.ErrorCodeUnsupportedFeature {
		t.Fatalf("delete: %v, want unsupported", err)
	}
}
