package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/provider/smtp/smtptest"
	"github.com/mailroom/mailroom/processmanagers"
)

// relayCounts is how many times each email reached the relays.
func relayCounts(t *testing.T, relays ...*smtptest.Relay) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, r := range relays {
		for _, m := range r.Messages() {
			msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
			if err != nil {
				t.Fatal(err)
			}
			got[msg.Header.Get("X-Mailroom-Email-Id")]++
		}
	}
	return got
}

// sendMany sends n emails from 8 clients and returns their ids.
func sendMany(t *testing.T, w *sendWorld, n int) []string {
	t.Helper()
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				r := w.Do("POST", "/v1/emails/send", w.key, map[string]any{"from": "a@acme.test", "to": fmt.Sprintf("u%d@example.org", i), "subject": "s", "text": "t"})
				if r.Status != 202 {
					t.Errorf("send: %d %s", r.Status, r.Body)
					continue
				}
				mu.Lock()
				ids = append(ids, r.JSON(t)["id"].(string))
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return ids
}

// waitSent waits until every email id has a sent_at in the read model.
func waitSent(t *testing.T, w *sendWorld, ids []string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM emails WHERE id = ANY($1) AND status NOT IN ('queued', 'processing')`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d emails left the pipeline", n, len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitJobsIdle waits until the job queue has no unfinished job.
func waitJobsIdle(t *testing.T, w *sendWorld) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs unfinished", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkOnce(t *testing.T, counts map[string]int, ids []string) {
	t.Helper()
	for _, id := range ids {
		if counts[id] != 1 {
			t.Errorf("email %s reached the relay %d times", id, counts[id])
		}
	}
}

// An upgrade from the sharded handlers starts the one email reader at the
// lowest shard checkpoint: emails the shards had sent are not sent again,
// even with no job left from before (the email streams show them sent), and
// a new provider concurrency after a restart changes nothing either.
func TestUpgradeFromShardsSendsNothingTwice(t *testing.T) {
	relay := smtptest.Start(t)
	url := pgtest.NewURL(t) + "&pool_max_conns=10"
	base := apptest.Config(t, url)
	base.Provider, base.SMTPURL = "smtp", "smtp://"+relay.Addr
	smtpConfig := func(concurrency int) config.Config {
		cfg := base
		cfg.ProviderConcurrency = concurrency
		return cfg
	}
	clock := apptest.NewClock()
	s := apptest.StartWithClock(t, smtpConfig(4), clock)
	acct, admin, key := s.Sender("acme.test")
	w := &sendWorld{Server: s, account: acct, admin: admin, key: key}
	first := sendMany(t, w, 30)
	waitSent(t, w, first)
	waitJobsIdle(t, w)
	s.Stop()

	// What an older release leaves: shard checkpoints, the lowest at the
	// start of the log, and no job queue content.
	ctx := context.Background()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`DELETE FROM processmanager_checkpoints WHERE name = 'email-pipeline'`,
		`INSERT INTO processmanager_checkpoints (name, commit_position, prepare_position) VALUES ('email-pipeline-0-of-2', 0, 0)`,
		`INSERT INTO processmanager_checkpoints (name, commit_position, prepare_position) SELECT 'email-pipeline-1-of-2', max(commit_position), 0 FROM processmanager_checkpoints`,
		`DELETE FROM river_job`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	s = apptest.StartWithClock(t, smtpConfig(32), clock)
	w.Server = s
	second := sendMany(t, w, 30)
	waitSent(t, w, second)
	waitJobsIdle(t, w)
	checkOnce(t, relayCounts(t, relay), append(first, second...))
	var replanned int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'email_send' AND args->>'email_id' = ANY($1)`, first).Scan(&replanned); err != nil {
		t.Fatal(err)
	}
	if replanned != len(first) {
		t.Errorf("%d of the %d emails sent before the upgrade were planned again, want all (from the lowest shard checkpoint)", replanned, len(first))
	}
	var old int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM processmanager_checkpoints WHERE name LIKE 'email-pipeline-%-of-%'`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old != 0 {
		t.Errorf("%d shard checkpoints left", old)
	}
}

// twoWorkers starts two Mailroom processes on one database, with one
// master key and blob store as in production, each sending through its own
// relay; w sends through the first.
func twoWorkers(t *testing.T, relayA, relayB *smtptest.Relay, configure func(*config.Config)) (a, b *apptest.Server, w *sendWorld) {
	t.Helper()
	url := pgtest.NewURL(t) + "&pool_max_conns=10"
	shared := t.TempDir()
	cfgFor := func(relay *smtptest.Relay) config.Config {
		cfg := apptest.Config(t, url)
		cfg.DataDir, cfg.BlobDir = shared, shared+"/blobs"
		cfg.Provider, cfg.SMTPURL = "smtp", "smtp://"+relay.Addr
		if configure != nil {
			configure(&cfg)
		}
		return cfg
	}
	a = apptest.StartWith(t, cfgFor(relayA))
	b = apptest.StartWith(t, cfgFor(relayB))
	acct, admin, key := a.Sender("acme.test")
	return a, b, &sendWorld{Server: a, account: acct, admin: admin, key: key}
}

// Two worker processes on one database share the sending: each sends some
// of the emails, and no email is sent by both.
func TestTwoWorkersShareSending(t *testing.T) {
	relayA, relayB := smtptest.Start(t), smtptest.Start(t)
	// One message at a time per worker, each taking a while: neither
	// worker can drain the queue before the other claims some.
	relayA.Delay(50 * time.Millisecond)
	relayB.Delay(50 * time.Millisecond)
	// However slowly worker B starts, A cannot drain the queue alone: its
	// relay answers nothing until B's has taken a message.
	bSent := make(chan struct{})
	relayA.HoldUntil(bSent)
	go func() {
		defer close(bSent)
		for deadline := time.Now().Add(30 * time.Second); len(relayB.Messages()) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, b, w := twoWorkers(t, relayA, relayB, func(c *config.Config) { c.ProviderConcurrency = 1 })
	ids := sendMany(t, w, 60)
	waitSent(t, w, ids)
	waitJobsIdle(t, w)
	checkOnce(t, relayCounts(t, relayA, relayB), ids)
	if na, nb := len(relayA.Messages()), len(relayB.Messages()); na == 0 || nb == 0 {
		t.Errorf("worker A sent %d, worker B %d: the work was not shared", na, nb)
	}
	b.Stop()
}

// A worker process stopped gracefully (a rolling deploy's SIGTERM) finishes
// the send it has in flight, and no other worker takes that send over
// meanwhile: the email reaches the provider once.
func TestGracefulStopHandsNothingOver(t *testing.T) {
	relayA, relayB := smtptest.Start(t), smtptest.Start(t)
	// Longer than a live worker takes to hand back a dead one's jobs (its
	// lock free for 5 s, seen by passes 2 s apart).
	relayA.Delay(10 * time.Second)
	relayB.Delay(10 * time.Second)
	a, b, w := twoWorkers(t, relayA, relayB, nil)
	ids := sendMany(t, w, 1)
	sending := a
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if relayB.Receiving() > 0 {
			sending = b
			break
		}
		if relayA.Receiving() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no worker started sending")
		}
	}
	sending.Stop() // returns once its workers have stopped
	other := *w
	if sending == a {
		other.Server = b
	}
	waitSent(t, &other, ids)
	time.Sleep(3 * time.Second) // room for a wrongful hand-over to show
	waitJobsIdle(t, &other)
	for deadline := time.Now().Add(30 * time.Second); relayA.Receiving()+relayB.Receiving() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a relay is still taking a message in")
		}
	}
	checkOnce(t, relayCounts(t, relayA, relayB), ids)
}

// A relay asking to slow down (421) delays an email without failing it
// and without making the provider count as failing; once the relay
// accepts again the email goes.
func TestThrottledSendWaitsAndGoesOut(t *testing.T) {
	relay := smtptest.Start(t)
	relay.RejectData(&gosmtp.SMTPError{Code: 421, EnhancedCode: gosmtp.EnhancedCode{4, 7, 0}, Message: "too many messages, slow down"})
	w := newSendWorld(t, func(c *config.Config) {
		c.Provider, c.SMTPURL = "smtp", "smtp://"+relay.Addr
	})
	id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for relay.Attempts() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the relay was offered the message %d times", relay.Attempts())
		}
		time.Sleep(20 * time.Millisecond)
	}
	e := w.Do("GET", "/v1/emails/"+id, w.key, nil).JSON(t)
	if e["status"] != "queued" {
		t.Fatalf("a throttled email is %v: %v", e["status"], e["events"])
	}
	// Its backoff counts its own tries, not every wait of its job.
	var tries int
	if err := w.Pool.QueryRow(context.Background(), `SELECT coalesce((metadata->>'send_tries')::int, 0) FROM river_job
		WHERE kind = 'email_send' AND args->>'email_id' = $1`, id).Scan(&tries); err != nil || tries < 2 {
		t.Fatalf("the send's tries recorded: %d %v", tries, err)
	}
	if r := w.Do("GET", "/readyz", "", nil); r.Status != 200 {
		t.Fatalf("/readyz while throttled: %d %s", r.Status, r.Body)
	}
	relay.RejectData(nil)
	w.waitFor(t, id, status("delivered"))
	checkOnce(t, relayCounts(t, relay), []string{id})
}

// An answer to slow down that never ends (a recipient's full mailbox
// answers 452 on every try) fails the email once MAILROOM_SEND_MAX_AGE has
// passed, as any transient failure does: no email stays queued for ever.
// The provider still does not count as failing.
func TestLastingThrottleFailsTheEmail(t *testing.T) {
	relay := smtptest.Start(t)
	relay.RejectData(&gosmtp.SMTPError{Code: 452, EnhancedCode: gosmtp.EnhancedCode{4, 2, 2}, Message: "mailbox full"})
	w := newSendWorld(t, func(c *config.Config) {
		c.Provider, c.SMTPURL = "smtp", "smtp://"+relay.Addr
		c.SendMaxAge = 2 * time.Second
	})
	id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string)
	e := w.waitFor(t, id, status("failed"))
	if r := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != "provider_unavailable" {
		t.Fatalf("reason %v", r)
	}
	if n := relay.Attempts(); n < 2 {
		t.Fatalf("the relay was offered the message %d times before it failed, want it retried", n)
	}
	if r := w.Do("GET", "/readyz", "", nil); r.Status != 200 {
		t.Fatalf("/readyz after throttling alone: %d %s", r.Status, r.Body)
	}
}

// An email that cannot leave for a reason of the service's own (here the
// content scanner is down) is retried for MAILROOM_SEND_MAX_AGE like a
// provider outage, and then fails: its timeline says internal_error.
func TestEmailFailsWhenTheScannerStaysDown(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) {
		c.ClamdAddr = "unix:" + t.TempDir() + "/clamd.sock" // nothing listens
		c.SendMaxAge = 2 * time.Second
	})
	id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string)
	e := w.waitFor(t, id, status("failed"))
	if r := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != "internal_error" {
		t.Fatalf("reason %v", r)
	}
}

// One account's emails whose attachments trickle in a byte a second take
// no more than that account's share of the workers: another account's
// emails are sent while they are still downloading.
func TestSlowAttachmentsDelayNoOtherAccount(t *testing.T) {
	trickle, downloading, _ := startTrickle(t, 0)
	defer trickle.CloseClientConnections() // before the workers stop, which wait for their downloads

	w := newSendWorld(t, func(c *config.Config) {
		c.ProviderConcurrency = 4
		c.AccountConcurrency = 2
		c.MaxSendingBytes = 0 // the account's share is what holds them back here, not memory
	})
	var slow []string
	for i := range 6 {
		slow = append(slow, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "slow", "text": "t",
			"attachments": []map[string]any{{"path": fmt.Sprintf("%s/files/slow-%d.bin", trickle.URL, i)}}})["id"].(string))
	}
	deadline := time.Now().Add(30 * time.Second)
	for downloading.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d downloads started", downloading.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	_, _, otherKey := w.Sender("other.test")
	other := &sendWorld{Server: w.Server, key: otherKey}
	var fast []string
	for range 5 {
		fast = append(fast, other.send(t, map[string]any{"from": "b@other.test", "to": "y@example.org", "subject": "fast", "text": "t"})["id"].(string))
	}
	for _, id := range fast {
		other.waitFor(t, id, status("delivered"))
	}
	if downloading.Load() == 0 {
		t.Fatal("the slow downloads ended before the other account's emails were sent")
	}
	for _, id := range slow {
		if e := w.Do("GET", "/v1/emails/"+id, w.key, nil).JSON(t); e["status"] == "delivered" || e["status"] == "sent" {
			t.Fatalf("slow email %s already %s", id, e["status"])
		}
	}
}

// A worker holds attachments of at most MAILROOM_MAX_SENDING_BYTES at once:
// emails with a download to come count at the largest it may be, so with
// room for two, two download at a time, while emails without attachments
// still go out.
func TestWorkerHoldsNoMoreAttachmentBytesThanItsBound(t *testing.T) {
	trickle, downloading, most := startTrickle(t, 0)
	defer trickle.CloseClientConnections() // before the workers stop, which wait for their downloads

	download := processmanagers.MemoryWeight(email.State{Queued: &email.Queued{Attachments: []email.Attachment{{Path: "x"}}}})
	w := newSendWorld(t, func(c *config.Config) {
		c.ProviderConcurrency, c.AccountConcurrency = 8, 0
		c.MaxSendingBytes = (2*download + 1) * 4 / 3 // three quarters for large emails: room for two
	})
	for i := range 4 {
		w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "large", "text": "t",
			"attachments": []map[string]any{{"path": fmt.Sprintf("%s/files/large-%d.bin", trickle.URL, i)}}})
	}
	deadline := time.Now().Add(30 * time.Second)
	for downloading.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d downloads started", downloading.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var small []string
	for range 3 {
		small = append(small, w.send(t, map[string]any{"from": "a@acme.test", "to": "y@example.org", "subject": "small", "text": "t"})["id"].(string))
	}
	for _, id := range small {
		w.waitFor(t, id, status("delivered"))
	}
	if n := most.Load(); n != 2 {
		t.Fatalf("%d downloads at once, want 2", n)
	}
}

// One account's emails waiting for room to download large attachments do
// not stand in front of another account's large email: it goes out while
// they still wait, though the room is taken in turns.
func TestLargeEmailsOfOneAccountLeaveRoomForAnother(t *testing.T) {
	trickle, downloading, _ := startTrickle(t, 0)
	defer trickle.CloseClientConnections() // before the workers stop, which wait for their downloads

	w := newSendWorld(t, func(c *config.Config) {
		c.MaxSendingBytes = 64 << 20 // the default: room for one download at a time
	})
	var slow []string
	for i := range 40 {
		slow = append(slow, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "slow", "text": "t",
			"attachments": []map[string]any{{"path": fmt.Sprintf("%s/files/slow-%d.bin", trickle.URL, i)}}})["id"].(string))
	}
	deadline := time.Now().Add(30 * time.Second)
	for downloading.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no download started")
		}
		time.Sleep(10 * time.Millisecond)
	}

	_, _, otherKey := w.Sender("other.test")
	other := &sendWorld{Server: w.Server, key: otherKey}
	report := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("r"), 3<<19)) // 1.5 MiB
	id := other.send(t, map[string]any{"from": "b@other.test", "to": "y@example.org", "subject": "report", "text": "t",
		"attachments": []map[string]any{{"filename": "report.bin", "content": report}}})["id"].(string)
	other.waitFor(t, id, status("delivered"))
	if downloading.Load() == 0 {
		t.Fatal("the slow downloads ended before the other account's email was sent")
	}
	for _, id := range slow {
		if e := w.Do("GET", "/v1/emails/"+id, w.key, nil).JSON(t); e["status"] == "delivered" || e["status"] == "sent" {
			t.Fatalf("slow email %s already %s", id, e["status"])
		}
	}
}

// A download that declares its length holds room for that length, not
// for the most it could be: with room for one undeclared download, several
// declared small ones of the same account go side by side.
func TestDownloadsOfDeclaredLengthGoSideBySide(t *testing.T) {
	trickle, downloading, most := startTrickle(t, 1000)
	defer trickle.CloseClientConnections() // before the workers stop, which wait for their downloads

	w := newSendWorld(t, func(c *config.Config) {
		c.MaxSendingBytes = 64 << 20 // the default: room for one undeclared download at a time
	})
	for i := range 4 {
		w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "declared", "text": "t",
			"attachments": []map[string]any{{"path": fmt.Sprintf("%s/files/small-%d.bin", trickle.URL, i)}}})
	}
	deadline := time.Now().Add(30 * time.Second)
	for downloading.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d downloads at once (most %d), want all 4", downloading.Load(), most.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The attachments of one email after another come over one connection to
// their server, kept between emails: a worker that opened a connection for
// each email would pay a new handshake each time and leave every one of
// them open, idle, for a minute and a half.
func TestSuccessiveEmailsDownloadOverOneConnection(t *testing.T) {
	var opened atomic.Int32
	files := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = rw.Write([]byte("%PDF-1.7 the invoice"))
	}))
	files.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	files.Start()
	t.Cleanup(files.Close)

	w := newSendWorld(t)
	for i := range 3 {
		id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "invoice", "text": "t",
			"attachments": []map[string]any{{"path": fmt.Sprintf("%s/files/invoice-%d.pdf", files.URL, i)}}})["id"].(string)
		w.waitFor(t, id, status("delivered"))
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("three emails' downloads opened %d connections to the file server, want 1", n)
	}
}

// startTrickle serves downloads that send a byte a second and never end
// (until the test does), counting those under way and the most at once.
// A length above 0 is declared in Content-Length.
func startTrickle(t *testing.T, length int) (srv *httptest.Server, downloading, most *atomic.Int32) {
	stop := make(chan struct{})
	downloading, most = new(atomic.Int32), new(atomic.Int32)
	srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := downloading.Add(1)
		defer downloading.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		rw.Header().Set("Content-Type", "application/octet-stream")
		left := math.MaxInt32
		if length > 0 {
			rw.Header().Set("Content-Length", fmt.Sprint(length))
			left = length
		}
		for range left {
			if _, err := rw.Write([]byte("x")); err != nil {
				return
			}
			rw.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: the handlers end, then the server closes
	return srv, downloading, most
}

// An email whose domain is removed while it waits for a worker fails as
// domain_removed and never reaches the provider, also when the account has
// added and verified the same name again meanwhile: that is another domain,
// with other keys.
func TestEmailOfARemovedDomainFails(t *testing.T) {
	url := pgtest.NewURL(t)
	shared := t.TempDir()
	cfgFor := func(roles ...string) config.Config {
		cfg := apptest.Config(t, url)
		cfg.DataDir, cfg.BlobDir, cfg.SandboxOutbox = shared, shared+"/blobs", shared+"/outbox"
		cfg.Roles = roles
		return cfg
	}
	a := apptest.StartWith(t, cfgFor("api", "projections")) // nothing sends yet
	account, admin, key := a.Sender("acme.test")
	r := a.Do("POST", "/v1/emails/send", key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})
	if r.Status != 202 {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	var domainID string
	if err := a.Pool.QueryRow(context.Background(), `SELECT id FROM domains WHERE name = 'acme.test'`).Scan(&domainID); err != nil {
		t.Fatal(err)
	}
	if r := a.Do("DELETE", "/api/domains/"+domainID, admin, nil); r.Status != 204 {
		t.Fatalf("delete domain: %d %s", r.Status, r.Body)
	}
	again, err := a.Commands.AddDomain(context.Background(), account, "acme.test", commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Commands.VerifyDomainBySandbox(context.Background(), again.ID, commands.Meta{Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	for a.Do("GET", "/api/domains/"+again.ID, admin, nil).JSON(t)["status"] != "verified" {
		time.Sleep(20 * time.Millisecond)
	}

	apptest.StartWith(t, cfgFor("workers"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := a.Do("GET", "/v1/emails/"+id, key, nil).JSON(t)
		if got["status"] == "failed" {
			ev := got["events"].([]any)[0].(map[string]any)
			if reason := ev["metadata"].(map[string]any)["reason"]; reason != "domain_removed" {
				t.Fatalf("failed with reason %v, want domain_removed", reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("email still %v after its domain was removed", got["status"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(shared, "outbox", id+".eml")); !os.IsNotExist(err) {
		t.Fatalf("the email reached the outbox: %v", err)
	}
}

// Emails waiting for the provider's send rate when their domain is removed
// do not leave after the removal is answered: they fail as domain_removed.
func TestEmailsWaitingForTheRateStopWhenTheirDomainGoes(t *testing.T) {
	a := apptest.StartWith(t, func() config.Config {
		cfg := apptest.Config(t, pgtest.NewURL(t))
		cfg.ProviderMaxRate = 1 // one recipient a second: the rest wait their turn
		return cfg
	}())
	_, admin, key := a.Sender("acme.test")
	var ids []string
	for range 4 {
		r := a.Do("POST", "/v1/emails/send", key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})
		if r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		ids = append(ids, r.JSON(t)["id"].(string))
	}
	var domainID string
	if err := a.Pool.QueryRow(context.Background(), `SELECT id FROM domains WHERE name = 'acme.test'`).Scan(&domainID); err != nil {
		t.Fatal(err)
	}
	if r := a.Do("DELETE", "/api/domains/"+domainID, admin, nil); r.Status != 204 {
		t.Fatalf("delete domain: %d %s", r.Status, r.Body)
	}
	removed := time.Now()

	failed, sentAfter := 0, 0
	for _, id := range ids {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := a.Do("GET", "/v1/emails/"+id, key, nil).JSON(t)
			if got["status"] == "failed" {
				if reason := got["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; reason != "domain_removed" {
					t.Fatalf("email %s failed for %v, want domain_removed", id, reason)
				}
				failed++
				break
			}
			if sent, ok := got["sent_at"].(string); ok {
				at, err := time.Parse(time.RFC3339, sent)
				if err != nil {
					t.Fatal(err)
				}
				// One that passed its check a moment before the removal
				// was answered may still be with the provider then: the
				// check is the last step before the call, not the call.
				// At one a second, no other can be.
				if at.After(removed) {
					sentAfter++
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("email %s still %v 30 s after its domain was removed", id, got["status"])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if sentAfter > 1 {
		t.Fatalf("%d emails were sent after their domain's removal was answered at %s", sentAfter, removed.UTC().Format(time.RFC3339Nano))
	}
	// At one a second, the removal comes before the last ones' turn.
	if failed == 0 {
		t.Fatal("no email waiting for the rate failed as domain_removed")
	}
}

// Emails waiting for their turn of the provider's rate are not sent once
// an erasure of their recipient has been answered: their messages may be
// rendered already, from content the erasure deleted.
func TestEmailsWaitingForTheRateAreNotSentOnceErased(t *testing.T) {
	cfg := apptest.Config(t, pgtest.NewURL(t))
	cfg.ProviderMaxRate = 1 // one recipient a second: the rest wait their turn
	a := apptest.StartWith(t, cfg)
	_, admin, key := a.Sender("acme.test")
	var ids []string
	for range 4 {
		r := a.Do("POST", "/v1/emails/send", key, map[string]any{"from": "a@acme.test", "to": "gone@example.org", "subject": "s", "text": "t"})
		if r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		ids = append(ids, r.JSON(t)["id"].(string))
	}
	if r := a.Do("POST", "/api/erasures", admin, map[string]any{"email": "gone@example.org"}); r.Status != 201 {
		t.Fatalf("erasure: %d %s", r.Status, r.Body)
	}
	erased := time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n int
		if err := a.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'email_send' AND args->>'email_id' = ANY($1)
			AND state NOT IN ('completed', 'discarded', 'cancelled')`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d send jobs unfinished a minute after the erasure", n)
		}
	}
	// One that passed its check a moment before the erasure was answered
	// may be with the provider then; at one a second, no other can be.
	sentAfter := 0
	for _, id := range ids {
		fi, err := os.Stat(filepath.Join(cfg.SandboxOutbox, id+".eml"))
		if err == nil && fi.ModTime().After(erased) {
			sentAfter++
		}
	}
	if sentAfter > 1 {
		t.Fatalf("%d of 4 erased emails were sent after the erasure was answered", sentAfter)
	}
}
