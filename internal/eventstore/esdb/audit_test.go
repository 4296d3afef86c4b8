package esdb_test

import (
	"bytes"
	"strings"
	"testing"

	client "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// TestAuditingASharedServerSkipsOtherApplicationsEvents: on an EventStoreDB
// that other applications write to as well, `events verify` checks
// Mailroom's hash chains and `events export` writes Mailroom's events; the
// others' (JSON with their own metadata, or binary) are counted as skipped,
// not reported as breaks or refused as data that is not JSON.
func TestAuditingASharedServerSkipsOtherApplicationsEvents(t *testing.T) {
	srv := startFake(t)
	s := open(t, srv.ConnectionString())
	raw := rawClient(t, srv.ConnectionString())
	ctx := testContext(t)
	cat := category()

	if _, err := s.Append(ctx, cat+"-1", eventstore.NoStream, newEvent("Ours", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.AppendToStream(ctx, "orders-1", client.AppendToStreamOptions{}, client.EventData{
		EventType: "OrderPlaced", ContentType: client.ContentTypeJson, Data: []byte("{\n  \"id\": 1\n}"),
		Metadata: []byte(`{"$correlationId":"x"}`),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.AppendToStream(ctx, "images-1", client.AppendToStreamOptions{}, client.EventData{
		EventType: "Thumbnail", ContentType: client.ContentTypeBinary, Data: []byte{0x89, 'P', 'N', 'G'},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, cat+"-1", eventstore.Exact(0), newEvent("Ours", 1)); err != nil {
		t.Fatal(err)
	}

	var breaks []eventstore.Break
	checked, foreign, err := eventstore.Verify(ctx, s, func(b eventstore.Break) { breaks = append(breaks, b) })
	if err != nil || len(breaks) > 0 || checked != 2 || foreign != 2 {
		t.Errorf("verify: %d checked, %d skipped, breaks %v, err %v; want 2 checked, 2 skipped", checked, foreign, breaks, err)
	}

	var out bytes.Buffer
	written, foreign, err := eventstore.Export(ctx, s, eventstore.Start, "", &out)
	if err != nil || written != 2 || foreign != 2 {
		t.Fatalf("export: %d written, %d skipped, err %v; want 2 and 2", written, foreign, err)
	}
	if strings.Contains(out.String(), "orders-1") || strings.Count(out.String(), "\n") != 2 {
		t.Errorf("the export holds more than Mailroom's two events:\n%s", out.String())
	}
	checked, _, err = eventstore.VerifyExport(&out, false, func(b eventstore.Break) { breaks = append(breaks, b) })
	if err != nil || len(breaks) > 0 || checked != 2 {
		t.Errorf("verify of the export: %d checked, breaks %v, err %v", checked, breaks, err)
	}
}

// An event without a hash is a break, not another application's, where it
// could be Mailroom's: in one of Mailroom's streams, whatever its type, or
// of one of Mailroom's types in a stream named as Mailroom's are. Readers
// act on such an event, so an audit must not pass over it. Another
// application's event of a type name Mailroom also uses, in a stream of its
// own, is that application's.
func TestAHashlessEventWhereMailroomsCouldBeIsABreak(t *testing.T) {
	srv := startFake(t)
	s := open(t, srv.ConnectionString())
	raw := rawClient(t, srv.ConnectionString())
	ctx := testContext(t)
	cat := category()

	if _, err := s.Append(ctx, cat+"-1", eventstore.NoStream, newEvent("Ours", 0)); err != nil {
		t.Fatal(err)
	}
	for stream, typ := range map[string]string{cat + "-1": "Ours", "email-injected": "EmailQueued", "crm-7": "AccountCreated"} {
		if _, err := raw.AppendToStream(ctx, stream, client.AppendToStreamOptions{}, client.EventData{
			EventType: typ, ContentType: client.ContentTypeJson, Data: []byte(`{"n":99}`),
		}); err != nil {
			t.Fatal(err)
		}
	}
	broken := map[string]bool{}
	checked, foreign, err := eventstore.Verify(ctx, s, func(b eventstore.Break) { broken[b.Stream] = true })
	if err != nil || foreign != 1 || checked != 3 || !broken[cat+"-1"] || !broken["email-injected"] || broken["crm-7"] {
		t.Errorf("verify: %d checked, %d skipped, breaks in %v, err %v; want 3 checked, crm-7's skipped, the other two streams broken",
			checked, foreign, broken, err)
	}
	var out bytes.Buffer
	if written, foreign, err := eventstore.Export(ctx, s, eventstore.Start, "", &out); err != nil || written != 3 || foreign != 1 {
		t.Errorf("export: %d written, %d skipped, err %v; want 3 written, crm-7's skipped", written, foreign, err)
	}
}

// An export from a position writes a hashless event in one of Mailroom's
// streams, as a whole export does, though the stream's events of
// Mailroom's are all before that position: an auditor exporting what is
// new since the last audit must see what was slipped in.
func TestAnExportFromAPositionKeepsWhatWasSlippedIntoMailroomsStreams(t *testing.T) {
	srv := startFake(t)
	s := open(t, srv.ConnectionString())
	raw := rawClient(t, srv.ConnectionString())
	ctx := testContext(t)
	cat := category()

	first, err := s.Append(ctx, cat+"-1", eventstore.NoStream, newEvent("Ours", 0))
	if err != nil {
		t.Fatal(err)
	}
	for stream, typ := range map[string]string{cat + "-1": "Slipped", "crm-8": "ContactAdded"} {
		if _, err := raw.AppendToStream(ctx, stream, client.AppendToStreamOptions{}, client.EventData{
			EventType: typ, ContentType: client.ContentTypeJson, Data: []byte(`{"n":99}`),
		}); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	written, foreign, err := eventstore.Export(ctx, s, first.Position, "", &out)
	if err != nil || written != 1 || foreign != 1 || !strings.Contains(out.String(), `"type":"Slipped"`) {
		t.Errorf("export from %s: %d written, %d skipped, err %v; want the slipped event written, crm-8's skipped:\n%s",
			first.Position, written, foreign, err, out.String())
	}
}

// TestAFailedExportKeepsWhatItWrote: an export that stops at an event it
// cannot write (data that is not JSON under Mailroom's metadata) has
// written the lines before it to its output, as many as it counts.
func TestAFailedExportKeepsWhatItWrote(t *testing.T) {
	srv := startFake(t)
	s := open(t, srv.ConnectionString())
	raw := rawClient(t, srv.ConnectionString())
	ctx := testContext(t)
	cat := category()

	if _, err := s.Append(ctx, cat+"-1", eventstore.NoStream, newEvent("Ours", 0), newEvent("Ours", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.AppendToStream(ctx, cat+"-1", client.AppendToStreamOptions{}, client.EventData{
		EventType: "Ours", ContentType: client.ContentTypeBinary, Data: []byte{0xff, 0x00},
		Metadata: []byte(`{"schema_version":1,"hash":"0000000000000000000000000000000000000000000000000000000000000000"}`),
	}); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	written, _, err := eventstore.Export(ctx, s, eventstore.Start, "", &out)
	if err == nil {
		t.Fatal("export of data that is not JSON succeeded")
	}
	if written != 2 || strings.Count(out.String(), "\n") != 2 {
		t.Errorf("export failed with %d events written and %d lines in its output: %q", written, strings.Count(out.String(), "\n"), out.String())
	}
}
