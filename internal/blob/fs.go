package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FS stores blobs as files under a directory, at dir/sha256/ab/cd/<hex>
// (two fan-out levels keep directories small).
//
// A blob is written to a temporary file in its final directory, synced, and
// renamed into place, so a crash never leaves a partial blob under its final
// name (a stray ".tmp-*" file at worst). Get re-hashes what it reads.
type FS struct {
	dir string
}

var _ Store = (*FS)(nil)

// NewFS returns a Store rooted at dir, creating dir when missing.
func NewFS(dir string) (*FS, error) {
	if dir == "" {
		return nil, errors.New("blob: NewFS: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob: NewFS: %w", err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("blob: NewFS: %w", err)
	}
	return &FS{dir: abs}, nil
}

// path returns the file name of d; d must be valid.
func (s *FS) path(d Digest) string {
	h := d.Hex()
	return filepath.Join(s.dir, "sha256", h[0:2], h[2:4], h)
}

// Put stores data unless an intact copy is already there. A copy that exists
// but no longer matches its digest is replaced.
func (s *FS) Put(ctx context.Context, data []byte) (Digest, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	d := DigestOf(data)
	p := s.path(d)
	if ok, err := fileHashes(p, d); err != nil {
		return "", fmt.Errorf("blob: put %s: %w", d, err)
	} else if ok {
		return d, nil
	}
	if err := writeAtomic(p, data); err != nil {
		return "", fmt.Errorf("blob: put %s: %w", d, err)
	}
	return d, nil
}

// Get reads the blob and checks it against its digest.
func (s *FS) Get(ctx context.Context, d Digest) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := ParseDigest(string(d)); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(s.path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", d, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: get %s: %w", d, err)
	}
	if err := verify(d, data); err != nil {
		return nil, err
	}
	return data, nil
}

// Writable reports whether the directory takes a new blob now: a file can
// be created there and a block written to it. A full disk, a file system
// turned read-only or a process out of file descriptors refuses every
// send's content, which readiness should say. Nothing is synced, and the
// file is removed at once.
func (s *FS) Writable() error {
	f, err := os.CreateTemp(s.dir, ".probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, 4096))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Delete removes the blob's file; a missing file is already deleted.
func (s *FS) Delete(ctx context.Context, d Digest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := ParseDigest(string(d)); err != nil {
		return err
	}
	p := s.path(d)
	err := os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob: delete %s: %w", d, err)
	}
	return syncDir(filepath.Dir(p))
}

// fileHashes reports whether the file at p exists and hashes to d.
func fileHashes(p string, d Digest) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return hex.EncodeToString(h.Sum(nil)) == d.Hex(), nil
}

// writeAtomic writes data to a temporary file beside p, syncs it and renames
// it to p, then syncs the directory so the rename itself is durable.
// Concurrent writers of the same blob each rename their own complete copy;
// the last rename wins and every copy is identical.
func writeAtomic(p string, data []byte) (err error) {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
