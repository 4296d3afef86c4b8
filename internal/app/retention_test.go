package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/blob/s3fake"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// personal is an email whose every personal part is a word that appears
// nowhere else, to look for afterwards.
type personal struct {
	to, subject, body, attachment string
}

func personalEmail(i int) personal {
	return personal{
		to:         fmt.Sprintf("zebra-keeper-%d@example.org", i),
		subject:    fmt.Sprintf("Invoice pineapple-%d", 7700+i),
		body:       fmt.Sprintf("secret-body-text-%d", 5500+i),
		attachment: fmt.Sprintf("attachment-text-%d", 9900+i),
	}
}

func (w *sendWorld) sendPersonal(t *testing.T, p personal) string {
	t.Helper()
	return w.send(t, map[string]any{
		"from": "Acme <billing@acme.test>", "to": p.to, "subject": p.subject,
		"html": "<p>" + p.body + "</p>", "text": p.body,
		"attachments": []map[string]any{{"filename": "notes.txt", "content": base64.StdEncoding.EncodeToString([]byte(p.attachment))}},
	})["id"].(string)
}

// export is `mailroom events export`.
func export(t *testing.T, s *apptest.Server) string {
	t.Helper()
	var buf bytes.Buffer
	if _, _, err := eventstore.Export(context.Background(), s.Ledger, eventstore.Start, "", &buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// verify is `mailroom events verify`.
func verify(t *testing.T, s *apptest.Server) {
	t.Helper()
	var breaks []eventstore.Break
	if _, _, err := eventstore.Verify(context.Background(), s.Ledger, func(b eventstore.Break) { breaks = append(breaks, b) }); err != nil || len(breaks) > 0 {
		t.Fatalf("events verify: %v %v", err, breaks)
	}
}

// rebuildAll is `mailroom projections rebuild --all`.
func rebuildAll(t *testing.T, s *apptest.Server) {
	t.Helper()
	for _, p := range s.Runner.Projectors() {
		if err := s.Runner.Rebuild(context.Background(), p, nil); err != nil {
			t.Fatalf("rebuild %s: %v", p.Name(), err)
		}
	}
}

// contentDigests are the blobs of an email, as its EmailQueued and
// EmailScanned name them, read while its key still opens them.
func contentDigests(t *testing.T, s *apptest.Server, id string) []blob.Digest {
	t.Helper()
	st, err := s.Commands.Email(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []blob.Digest
	for _, d := range []string{st.Queued.HTMLDigest, st.Queued.TextDigest} {
		if d != "" {
			out = append(out, blob.Digest(d))
		}
	}
	for _, a := range st.Attachments() {
		if a.Digest != "" {
			out = append(out, blob.Digest(a.Digest))
		}
	}
	if len(out) < 3 {
		t.Fatalf("email %s has %d blobs, want html, text and the attachment", id, len(out))
	}
	return out
}

// blobGone reports whether blob storage (the filesystem or S3, as
// configured) no longer has d.
func blobGone(t *testing.T, s *apptest.Server, d blob.Digest) bool {
	t.Helper()
	_, err := s.Blobs.Get(context.Background(), d)
	return errors.Is(err, blob.ErrNotFound)
}

// answers are what a client reads of the account: the email list, each
// listed email, and the daily counts.
func answers(t *testing.T, w *sendWorld, from, to time.Time) string {
	t.Helper()
	var b strings.Builder
	list := w.Do("GET", "/v1/emails?per_page=100", w.key, nil)
	b.Write(list.Body)
	for _, e := range list.JSON(t)["data"].([]any) {
		b.Write(w.Do("GET", "/v1/emails/"+e.(map[string]any)["id"].(string), w.key, nil).Body)
	}
	b.Write(w.Do("GET", "/api/stats/daily?from="+from.Format(time.DateOnly)+"&to="+to.Format(time.DateOnly), w.admin, nil).Body)
	return b.String()
}

// waitGone waits until the email's detail answers 404, as the read model
// catches up with its erasure.
func (w *sendWorld) waitGone(t *testing.T, id string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		r := w.Do("GET", "/v1/emails/"+id, w.key, nil)
		if r.Status == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("erased email %s still answers %d", id, r.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dayCounts(t *testing.T, w *sendWorld, day time.Time) map[string]any {
	t.Helper()
	d := day.Format(time.DateOnly)
	r := w.Do("GET", "/api/stats/daily?from="+d+"&to="+d, w.admin, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /api/stats/daily: %d %s", r.Status, r.Body)
	}
	data := r.JSON(t)["data"].([]any)
	if len(data) != 1 {
		t.Fatalf("stats for one day: %s", r.Body)
	}
	return data[0].(map[string]any)
}

func TestRetentionErasesOldEmailsEverywhere(t *testing.T) {
	t.Run("filesystem", func(t *testing.T) { testRetention(t) })
	t.Run("s3", func(t *testing.T) {
		// The S3 protocol fake, reached as MAILROOM_BLOB_S3_ENDPOINT with
		// credentials from the environment, as in production.
		none := filepath.Join(t.TempDir(), "none")
		for k, v := range map[string]string{"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_PROFILE": "",
			"AWS_ACCESS_KEY_ID": "AKIDRETENTION", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "",
			"AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_S3": "", "AWS_CA_BUNDLE": "", "AWS_EC2_METADATA_DISABLED": "true"} {
			t.Setenv(k, v)
		}
		fake := s3fake.New(t, "AKIDRETENTION", "us-east-1", "mailroom-blobs", false)
		testRetention(t, func(c *config.Config) {
			c.BlobS3Bucket, c.BlobS3Endpoint, c.Region = "mailroom-blobs", fake.URL(), "us-east-1"
		})
		if keys := fake.Keys(); len(keys) != 3 { // html, text and attachment of the one email kept
			t.Errorf("the bucket holds %d objects after retention, want the kept email's 3: %v", len(keys), keys)
		}
	})
}

func testRetention(t *testing.T, configure ...func(*config.Config)) {
	w := newSendWorld(t, configure...)
	ctx := context.Background()
	sentDay := w.Clock.Now()
	var old []string
	var olds []personal
	for i := range 3 {
		p := personalEmail(i)
		olds = append(olds, p)
		old = append(old, w.sendPersonal(t, p))
	}
	digests := map[string][]blob.Digest{}
	for _, id := range old {
		w.waitFor(t, id, status("delivered"))
		digests[id] = contentDigests(t, w.Server, id)
	}
	before := dayCounts(t, w, sentDay)
	if before["sent"] != 3.0 || before["delivered"] != 3.0 {
		t.Fatalf("daily counts before retention: %v", before)
	}

	// 46 days later, past the default 45, a new email is sent and kept.
	w.Clock.Advance(46 * 24 * time.Hour)
	keep := personalEmail(99)
	kept := w.sendPersonal(t, keep)
	w.waitFor(t, kept, status("delivered"))

	ran, erased, err := w.Retention().Tick(ctx)
	if err != nil || !ran || erased != 3 {
		t.Fatalf("retention pass: ran %v, erased %d, err %v; want 3 erased", ran, erased, err)
	}

	for _, id := range old {
		w.waitGone(t, id)
		for _, d := range digests[id] {
			if !blobGone(t, w.Server, d) {
				t.Errorf("erased email %s: blob %s still stored", id, d)
			}
		}
	}
	list := string(w.Do("GET", "/v1/emails", w.key, nil).Body)
	if !strings.Contains(list, kept) || slices.ContainsFunc(old, func(id string) bool { return strings.Contains(list, id) }) {
		t.Errorf("list after retention holds the erased emails or lost the kept one: %s", list)
	}
	if e := w.waitFor(t, kept, status("delivered")); e["subject"] != keep.subject {
		t.Errorf("kept email after retention: %v", e)
	}

	log := export(t, w.Server)
	for _, p := range olds {
		for _, word := range []string{p.to, p.subject, p.body, p.attachment} {
			if strings.Contains(log, word) {
				t.Errorf("events export still holds %q", word)
			}
		}
	}
	if got := strings.Count(log, `"type":"EmailErased"`); got != 3 {
		t.Errorf("export has %d EmailErased, want 3", got)
	}
	verify(t, w.Server)

	if after := dayCounts(t, w, sentDay); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("daily counts of the erased day changed: %v, was %v", after, before)
	}

	// A rebuild of every projection gives the same answers.
	from, to := sentDay.AddDate(0, 0, -1), w.Clock.Now()
	want := answers(t, w, from, to)
	rebuildAll(t, w.Server)
	if got := answers(t, w, from, to); got != want {
		t.Errorf("answers after rebuild differ:\n got %s\nwant %s", got, want)
	}

	// A second pass finds nothing left to do.
	if _, erased, err := w.Retention().Tick(ctx); err != nil || erased != 0 {
		t.Errorf("second pass: erased %d, err %v", erased, err)
	}
}

func TestAccountRetentionIsItsOwn(t *testing.T) {
	w := newSendWorld(t)
	member, err := w.Commands.IssueToken(context.Background(), w.account, account.RoleMember, commands.Meta{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, w.Do("PATCH", "/api/account", member, map[string]any{"retention_days": 7}), http.StatusForbidden, "role_required")
	r := w.Do("PATCH", "/api/account", w.admin, map[string]any{"retention_days": 400})
	wantProblem(t, r, http.StatusUnprocessableEntity, "validation_failed")
	if r := w.Do("PATCH", "/api/account", w.admin, map[string]any{"retention_days": 7}); r.Status != http.StatusOK || r.JSON(t)["retention_days"] != 7.0 {
		t.Fatalf("PATCH /api/account: %d %s", r.Status, r.Body)
	}
	if r := w.Do("GET", "/api/account", w.admin, nil); r.JSON(t)["retention_days"] != 7.0 {
		t.Fatalf("GET /api/account: %s", r.Body)
	}
	id := w.sendPersonal(t, personalEmail(1))
	w.waitFor(t, id, status("delivered"))

	w.Clock.Advance(8 * 24 * time.Hour) // past 7 days, well within the default 45
	if _, erased, err := w.Retention().Tick(context.Background()); err != nil || erased != 1 {
		t.Fatalf("retention pass: erased %d, err %v", erased, err)
	}
	w.waitGone(t, id)
}

// An account that set its own retention can go back to the server's
// default with null; a body without the field is still refused.
func TestAccountRetentionGoesBackToTheDefault(t *testing.T) {
	w := newSendWorld(t)
	if r := w.Do("PATCH", "/api/account", w.admin, map[string]any{"retention_days": 7}); r.Status != http.StatusOK {
		t.Fatalf("PATCH 7 days: %d %s", r.Status, r.Body)
	}
	wantProblem(t, w.Do("PATCH", "/api/account", w.admin, map[string]any{}), http.StatusUnprocessableEntity, "validation_failed")
	wantProblem(t, w.Do("PATCH", "/api/account", w.admin, `{"retention_days": "7"}`), http.StatusBadRequest, "invalid_type")
	r := w.Do("PATCH", "/api/account", w.admin, map[string]any{"retention_days": nil})
	if r.Status != http.StatusOK || r.JSON(t)["retention_days"] != float64(w.Config.RetentionDays) {
		t.Fatalf("PATCH null: %d %s", r.Status, r.Body)
	}
	id := w.sendPersonal(t, personalEmail(1))
	w.waitFor(t, id, status("delivered"))
	w.Clock.Advance(8 * 24 * time.Hour) // past the 7 days it had, within the default 45
	if _, erased, err := w.Retention().Tick(context.Background()); err != nil || erased != 0 {
		t.Fatalf("retention pass on the default: erased %d, err %v", erased, err)
	}
}

func TestRetentionRunsOnceAcrossInstancesAndResumes(t *testing.T) {
	w := newSendWorld(t)
	ctx := context.Background()
	var ids []string
	for i := range 6 {
		ids = append(ids, w.sendPersonal(t, personalEmail(i)))
	}
	for _, id := range ids {
		w.waitFor(t, id, status("delivered"))
	}
	// A pass cut off half-way: the first email lost its blobs only, the
	// second its blobs and its key, and neither recorded EmailErased.
	for i, id := range ids[:2] {
		st, err := w.Commands.Email(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Content.Delete(ctx, contentDigests(t, w.Server, id)...); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := w.Keys.Destroy(ctx, codec.KeyID(id), st.Queued.AccountID); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A second instance on the same database, with the same clock.
	other := apptest.StartWithClock(t, w.Config, w.Clock)
	w.Clock.Advance(46 * 24 * time.Hour)
	// Both instances pass at once (their own timers may pass too): the
	// lock lets one work, and the aggregate refuses a second erasure.
	var wg sync.WaitGroup
	for _, s := range []*apptest.Server{w.Server, other, w.Server, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := s.Retention().Tick(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, _, err := other.Retention().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		w.waitGone(t, id)
	}
	log := export(t, w.Server)
	for _, id := range ids {
		if n := strings.Count(log, `"stream":"`+email.Stream(id)+`"`+`,"revision"`); n == 0 {
			t.Fatalf("no events of %s exported", id)
		}
		var erasedEvents int
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, `"stream":"`+email.Stream(id)+`"`) && strings.Contains(line, `"type":"EmailErased"`) {
				erasedEvents++
			}
		}
		if erasedEvents != 1 {
			t.Errorf("email %s has %d EmailErased, want exactly 1", id, erasedEvents)
		}
	}
	verify(t, w.Server)
}
