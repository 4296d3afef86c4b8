package blob

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func newTestFS(t *testing.T) (*FS, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "blobs") // does not exist yet: NewFS creates it
	s, err := NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// files lists every regular file under dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFSRoundTrip(t *testing.T) {
	s, dir := newTestFS(t)
	ctx := context.Background()
	for _, data := range [][]byte{[]byte("<p>Hello</p>"), {}, bytes.Repeat([]byte{0, 1, 2, 255}, 1<<18)} {
		d, err := s.Put(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		if d != DigestOf(data) {
			t.Fatalf("Put digest %s, want %s", d, DigestOf(data))
		}
		got, err := s.Get(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("Get returned %d bytes, want %d", len(got), len(data))
		}
		h := d.Hex()
		want := filepath.Join(dir, "sha256", h[:2], h[2:4], h)
		if _, err := os.Stat(want); err != nil {
			t.Fatalf("blob not at documented path: %v", err)
		}
	}
}

func TestFSSameBytesStoredOnce(t *testing.T) {
	s, dir := newTestFS(t)
	ctx := context.Background()
	data := []byte("same attachment")
	d1, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	p := s.path(d1)
	st1, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := s.Put(ctx, bytes.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Fatalf("digests differ: %s %s", d1, d2)
	}
	st2, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(st1, st2) {
		t.Error("second Put of the same bytes rewrote the file")
	}
	if got := files(t, dir); len(got) != 1 {
		t.Errorf("files after two puts of the same bytes: %v", got)
	}
}

func TestFSMissing(t *testing.T) {
	s, _ := newTestFS(t)
	_, err := s.Get(context.Background(), DigestOf([]byte("never stored")))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of missing blob = %v, want ErrNotFound", err)
	}
}

func TestFSInvalidDigest(t *testing.T) {
	s, _ := newTestFS(t)
	for _, d := range []Digest{"", "sha256:../../../etc/passwd", "sha256:ABC"} {
		_, err := s.Get(context.Background(), d)
		if err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v, want a malformed-digest error", d, err)
		}
	}
}

func TestFSCorruptedFile(t *testing.T) {
	s, _ := newTestFS(t)
	ctx := context.Background()
	data := []byte("invoice body")
	d, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	// Same length, one byte flipped: a size check alone would not notice.
	bad := bytes.Clone(data)
	bad[0] ^= 0x20
	if err := os.WriteFile(s.path(d), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, d)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of corrupted blob = %q, %v; want ErrCorrupt", got, err)
	}
	// Putting the bytes again repairs the blob.
	if _, err := s.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after repair: %q, %v", got, err)
	}
}

func TestFSConcurrentPutsOfSameBlob(t *testing.T) {
	s, dir := newTestFS(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("logo.png bytes "), 50_000)
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Put(ctx, data)
			if err == nil && d != DigestOf(data) {
				err = errors.New("wrong digest " + string(d))
			}
			if err == nil {
				// A reader racing the writers sees the whole blob or nothing.
				var got []byte
				got, err = s.Get(ctx, d)
				if err == nil && !bytes.Equal(got, data) {
					err = errors.New("partial blob read")
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := files(t, dir)
	if len(got) != 1 || strings.Contains(got[0], ".tmp-") {
		t.Fatalf("files after concurrent puts: %v (want the one blob, no temp files)", got)
	}
}

func TestFSCanceledContext(t *testing.T) {
	s, _ := newTestFS(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with canceled context = %v", err)
	}
}

func TestNewFSEmptyDir(t *testing.T) {
	if _, err := NewFS(""); err == nil {
		t.Fatal("NewFS(\"\"): want error")
	}
}

func TestFSDelete(t *testing.T) {
	s, dir := newTestFS(t)
	checkDelete(t, s, func(kept Digest) {
		if got := files(t, dir); len(got) != 1 || !strings.HasSuffix(got[0], kept.Hex()) {
			t.Fatalf("files after Delete: %v (want only the other blob)", got)
		}
	})
	if err := s.Delete(context.Background(), "sha256:../../../etc/passwd"); err == nil {
		t.Fatal("Delete of a malformed digest: want error")
	}
}

// checkDelete holds a store to Delete's contract: a deleted blob is gone,
// and only it (stored checks the backend holds only kept); deleting it
// again, or a blob never stored, is not an error. It returns the kept
// blob's digest.
func checkDelete(t *testing.T, s Store, stored func(kept Digest)) Digest {
	t.Helper()
	ctx := context.Background()
	kept, err := s.Put(ctx, []byte("another email's body"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Put(ctx, []byte("erased body"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	stored(kept)
	if err := s.Delete(ctx, d); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := s.Delete(ctx, DigestOf([]byte("never stored"))); err != nil {
		t.Fatalf("Delete of a missing blob: %v", err)
	}
	if got, err := s.Get(ctx, kept); err != nil || string(got) != "another email's body" {
		t.Fatalf("the other blob: %q, %v", got, err)
	}
	return kept
}
