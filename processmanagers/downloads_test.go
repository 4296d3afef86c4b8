package processmanagers_test

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/projections"
)

// downloadRig is a pipeline rig whose emails have an attachment given by
// path, served by a file server that counts its downloads, and whose
// provider rate counts the turns taken.
type downloadRig struct {
	*pipelineRig
	dir       string // the blob store's directory
	url       string
	downloads atomic.Int32
	turns     atomic.Int32
	status    int // the file server's answer
}

func newDownloadRig(t *testing.T) *downloadRig {
	r := &downloadRig{pipelineRig: newPipelineRig(t), dir: t.TempDir(), status: http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.downloads.Add(1)
		w.WriteHeader(r.status)
		_, _ = w.Write([]byte("%PDF-1.7 the invoice"))
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/invoice.pdf"
	local, err := egress.ParseCIDRs("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	r.pipeline.Egress = egress.Policy{AllowCIDRs: local, AllowHTTP: true}
	r.pipeline.Downloads = r.pipeline.Egress.Client(30 * time.Second)
	r.pipeline.Pace = func(context.Context, int) error { r.turns.Add(1); return nil }
	fsys, err := blob.NewFS(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	r.blobs = fsys
	r.content = datakeys.NewBlobs(fsys, r.keys)
	r.pipeline.Content = r.content
	return r
}

// queuePath queues an email whose attachment is downloaded from the rig's
// file server.
func (r *downloadRig) queuePath(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	d, err := r.content.Put(ctx, id, "acct-1", []byte("<p>Your invoice</p>"))
	if err != nil {
		t.Fatal(err)
	}
	q := &email.Queued{EmailID: id, AccountID: "acct-1", DomainID: "dom-1", From: "Acme <news@example.com>",
		FromEmail: "news@example.com", To: []string{"ann@example.org"}, Subject: "Invoice", HTMLDigest: string(d[0]),
		QueuedAt: queuedAt, Attachments: []email.Attachment{{Filename: "invoice.pdf", Path: r.url}}}
	data, err := codec.Encode(q, eventstore.Metadata{Actor: "apikey:k_test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Append(ctx, email.Stream(id), eventstore.NoStream, data); err != nil {
		t.Fatal(err)
	}
	return id
}

// files counts the blob store's files.
func (r *downloadRig) files(t *testing.T) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(r.dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An email that will not leave (its account suspended, its domain removed,
// a recipient suppressed) downloads nothing and takes no turn of the
// provider rate all accounts share; a suspended account's email is held
// even when its attachment's server is down, as it would be without one.
func TestEmailsThatDoNotLeaveCostNothingFirst(t *testing.T) {
	for _, c := range []struct {
		name   string
		checks processmanagers.Checks
		want   []string
	}{
		{"suspended", processmanagers.Checks{Suspended: true, CanSend: true}, []string{"EmailQueued", "EmailHeld"}},
		{"domain removed", processmanagers.Checks{}, []string{"EmailQueued", "EmailFailed"}},
		{"suppressed", processmanagers.Checks{CanSend: true, Suppressed: []string{"ann@example.org"}}, []string{"EmailQueued", "EmailFailed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newDownloadRig(t)
			r.status = http.StatusServiceUnavailable
			r.checks = c.checks
			var sent atomic.Int32
			r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) { sent.Add(1); return "m", nil })
			id := r.queuePath(t)
			if err := r.process(id); err != nil {
				t.Fatalf("processing: %v", err)
			}
			if got := r.types(t, id); !slices.Equal(got, c.want) || r.downloads.Load() != 0 || r.turns.Load() != 0 || sent.Load() != 0 {
				t.Errorf("stream %q, %d downloads, %d rate turns, %d provider calls; want %q and none of them",
					got, r.downloads.Load(), r.turns.Load(), sent.Load(), c.want)
			}
		})
	}
}

// What the gateway downloaded belongs to the email once an event names it,
// when it has left; an email that fails or tries again after its download
// leaves nothing in blob storage, however many times it tries.
func TestDownloadsOfAnEmailThatDoesNotLeaveAreDropped(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(*downloadRig)
		tries int
	}{
		{"provider rejects it", func(r *downloadRig) {
			r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) {
				return "", &provider.RejectedError{Code: "550", Reason: "no"}
			})
		}, 1},
		{"provider down", func(r *downloadRig) {
			r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) { return "", errors.New("connection refused") })
		}, 3},
		{"rate wait ends", func(r *downloadRig) {
			r.pipeline.Pace = func(context.Context, int) error { return context.Canceled }
		}, 2},
		{"suspended while it waits its turn", func(r *downloadRig) {
			r.pipeline.Pace = func(context.Context, int) error { r.checks.Suspended = true; return nil }
		}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newDownloadRig(t)
			c.setup(r)
			id := r.queuePath(t)
			before := r.files(t)
			for range c.tries {
				_ = r.process(id)
			}
			if r.downloads.Load() == 0 {
				t.Fatalf("nothing was downloaded; stream %q", r.types(t, id))
			}
			if after := r.files(t); after != before {
				t.Errorf("blob files %d before, %d after %d tries (%d downloads); stream %q: what no event names was kept",
					before, after, c.tries, r.downloads.Load(), r.types(t, id))
			}
		})
	}

	// An email that leaves keeps what it downloaded.
	r := newDownloadRig(t)
	id := r.queuePath(t)
	before := r.files(t)
	if err := r.process(id); err != nil {
		t.Fatal(err)
	}
	if got := r.types(t, id); !slices.Contains(got, "EmailSent") || r.files(t) != before+1 {
		t.Errorf("stream %q, blob files %d before and %d after; want sent and its download kept", got, before, r.files(t))
	}
}

// The check before the work goes by what the read models show: only the
// last one waits for them, so a lagging read model costs an email one
// wait, not two.
func TestOnlyTheLastCheckWaitsForTheReadModels(t *testing.T) {
	r := newDownloadRig(t)
	waits := 0
	r.pipeline.Settle = func(context.Context, eventstore.Position, ...projections.Name) error { waits++; return nil }
	id := r.queuePath(t)
	if err := r.process(id); err != nil {
		t.Fatal(err)
	}
	if got := r.types(t, id); !slices.Contains(got, "EmailSent") || waits != 1 || r.turns.Load() != 1 {
		t.Errorf("stream %q, %d waits for the read models, %d rate turns; want sent after one of each", got, waits, r.turns.Load())
	}
}
