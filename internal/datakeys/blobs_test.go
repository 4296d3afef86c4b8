package datakeys_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/secretbox"
)

func newBlobs(t *testing.T) (*datakeys.Blobs, *datakeys.Keyring, *blob.FS) {
	t.Helper()
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	store, err := blob.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	keys := datakeys.New(pgtest.NewPool(t), box)
	return datakeys.NewBlobs(store, keys), keys, store
}

func TestBlobsAreSealedPerEmail(t *testing.T) {
	ctx := context.Background()
	blobs, _, store := newBlobs(t)
	body := []byte("<p>Dear Ada, your invoice is attached.</p>")
	text := []byte("Dear Ada, your invoice is attached.")
	first, err := blobs.Put(ctx, "e1", "acct-1", body, text)
	if err != nil {
		t.Fatal(err)
	}
	second, err := blobs.Put(ctx, "e2", "acct-1", body)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || len(second) != 1 {
		t.Fatalf("Put gave %d and %d digests, want one for each part", len(first), len(second))
	}
	d1, d2 := first[0], second[0]
	// The parts of one Put come back one for one.
	if got, err := blobs.Get(ctx, "e1", first[1]); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("Get of e1's second part = %q, %v; want %q", got, err, text)
	}
	if d1 == d2 {
		t.Fatal("two emails with the same body share a blob")
	}
	stored, err := store.Get(ctx, d1)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored, []byte("Ada")) {
		t.Fatalf("the stored blob holds the body in the clear: %q", stored)
	}
	for id, d := range map[string]blob.Digest{"e1": d1, "e2": d2} {
		if got, err := blobs.Get(ctx, id, d); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Get(%s) = %q, %v", id, got, err)
		}
	}
	// A blob of one email does not open as another's.
	if got, err := blobs.Get(ctx, "e2", d1); err == nil {
		t.Fatalf("e1's blob opened as e2's: %q", got)
	}
	// Deleting one email's blob leaves the other's.
	if err := blobs.Delete(ctx, d1); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Get(ctx, "e1", d1); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want blob.ErrNotFound", err)
	}
	if got, err := blobs.Get(ctx, "e2", d2); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the other email's blob after Delete: %q, %v", got, err)
	}
	if err := blobs.Delete(ctx, d1, d1); err != nil {
		t.Fatalf("Delete of deleted blobs: %v", err)
	}
}

func TestBlobsOfAnErasedEmail(t *testing.T) {
	ctx := context.Background()
	blobs, keys, store := newBlobs(t)
	stored, err := blobs.Put(ctx, "e1", "acct-1", []byte("attachment"))
	if err != nil {
		t.Fatal(err)
	}
	d := stored[0]
	if err := keys.Destroy(ctx, codec.KeyID("e1"), "acct-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Get(ctx, "e1", d); !errors.Is(err, datakeys.ErrErased) {
		t.Fatalf("Get after the key was destroyed = %v, want ErrErased", err)
	}
	if _, err := blobs.Put(ctx, "e1", "acct-1", []byte("more")); !errors.Is(err, datakeys.ErrErased) {
		t.Fatalf("Put for an erased email = %v, want ErrErased", err)
	}
	// A plain blob of the erased email reads as erased too.
	plain, err := store.Put(ctx, []byte("written before sealing"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Get(ctx, "e1", plain); !errors.Is(err, datakeys.ErrErased) {
		t.Fatalf("Get of a plain blob of an erased email = %v, want ErrErased", err)
	}
}

func TestBlobsWrittenBeforeSealingStillRead(t *testing.T) {
	ctx := context.Background()
	blobs, _, store := newBlobs(t)
	for _, content := range [][]byte{[]byte("Hello"), {}, {0, 'm', 'r'}} {
		d, err := store.Put(ctx, content)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := blobs.Get(ctx, "old-email", d); err != nil || !bytes.Equal(got, content) {
			t.Fatalf("Get of a plain blob = %q, %v; want %q", got, err, content)
		}
	}
}

// A sealed blob is never handed out as it is stored, even when its email
// has no key (here: another database's keyring over the same store).
func TestSealedBlobWithoutItsKey(t *testing.T) {
	ctx := context.Background()
	blobs, _, store := newBlobs(t)
	stored, err := blobs.Put(ctx, "e1", "acct-1", []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	d := stored[0]
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := datakeys.NewBlobs(store, datakeys.New(pgtest.NewPool(t), box))
	if got, err := elsewhere.Get(ctx, "e1", d); !errors.Is(err, datakeys.ErrNoKey) {
		t.Fatalf("Get without the email's key = %q, %v; want ErrNoKey", got, err)
	}
}

// Concurrent first writes of one email (retries of one request) share one
// key: each succeeds, and what each sealed opens.
func TestConcurrentPutsOfOneEmail(t *testing.T) {
	ctx := context.Background()
	blobs, _, _ := newBlobs(t)
	const emails, writers = 50, 8
	for e := range emails {
		id := fmt.Sprintf("e%d", e)
		digests := make([][]blob.Digest, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() { digests[i], errs[i] = blobs.Put(ctx, id, "acct-1", []byte("body")) })
		}
		wg.Wait()
		for i := range writers {
			if errs[i] != nil {
				t.Fatalf("email %s, put %d: %v", id, i, errs[i])
			}
			if got, err := blobs.Get(ctx, id, digests[i][0]); err != nil || string(got) != "body" {
				t.Fatalf("email %s, blob %d: %q, %v", id, i, got, err)
			}
		}
	}
}

// failsLarge is a blob store whose writes of more than a kilobyte fail,
// once a smaller write has been stored: a disk that fills up part-way
// through an email's parts.
type failsLarge struct {
	blob.Store
	stored chan struct{}
	once   sync.Once
}

func (f *failsLarge) Put(ctx context.Context, data []byte) (blob.Digest, error) {
	if len(data) > 1024 {
		<-f.stored
		return "", errors.New("no space left on device")
	}
	d, err := f.Store.Put(ctx, data)
	f.once.Do(func() { close(f.stored) })
	return d, err
}

// storedFiles lists the blobs stored under dir.
func storedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An email whose parts could not all be stored keeps none of them: the
// caller records no digest, so a part left behind would be content that no
// event names, out of reach of retention and erasure.
func TestAPutThatFailsPartWayLeavesNothingStored(t *testing.T) {
	ctx := context.Background()
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fsStore, err := blob.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	blobs := datakeys.NewBlobs(&failsLarge{Store: fsStore, stored: make(chan struct{})}, datakeys.New(pgtest.NewPool(t), box))
	if _, err := blobs.Put(ctx, "e1", "acct-1", []byte("<p>Dear Ada</p>"), bytes.Repeat([]byte("%PDF"), 1024)); err == nil {
		t.Fatal("Put succeeded on a full disk")
	}
	if left := storedFiles(t, dir); len(left) != 0 {
		t.Fatalf("a failed Put left %d blobs stored: %q", len(left), left)
	}
}
