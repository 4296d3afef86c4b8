// Package blob is Mailroom's content-addressed storage for email bodies and
// attachment bytes.
//
// Events never carry bytes, only a Digest: the SHA-256 of the content. A blob
// is written once and never changes, so storing the same bytes twice is a
// no-op and a reader can always check that what it got back is what was
// stored. Two adapters implement Store: FS (the default, a directory on local
// disk) and S3 (production). A blob is deleted when what it belongs to is
// erased.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Store keeps immutable blobs addressed by the SHA-256 of their content.
type Store interface {
	// Put stores data and returns its digest. It is idempotent: the same
	// bytes always give the same digest and are stored once.
	Put(ctx context.Context, data []byte) (Digest, error)
	// Get returns the bytes stored under d. It returns an error wrapping
	// ErrNotFound when there is no such blob, and one wrapping ErrCorrupt
	// when the stored bytes no longer hash to d.
	Get(ctx context.Context, d Digest) ([]byte, error)
	// Delete removes the blob stored under d. Deleting a blob that is not
	// there is not an error, so a delete that was cut short can be repeated.
	Delete(ctx context.Context, d Digest) error
}

// ErrNotFound is returned (wrapped) by Get when no blob has the digest.
var ErrNotFound = errors.New("blob not found")

// ErrCorrupt is returned (wrapped) by Get when the stored bytes do not match
// their digest: the blob was damaged at rest and must not be sent.
var ErrCorrupt = errors.New("blob content does not match its digest")

// Digest names a blob: "sha256:" followed by 64 lowercase hex characters.
type Digest string

const digestPrefix = "sha256:"

// DigestOf returns the digest of data.
func DigestOf(data []byte) Digest {
	sum := sha256.Sum256(data)
	return Digest(digestPrefix + hex.EncodeToString(sum[:]))
}

// ParseDigest checks that s is a well-formed digest and returns it. Only the
// canonical form is accepted (lowercase hex), so one blob has one name.
func ParseDigest(s string) (Digest, error) {
	h, ok := strings.CutPrefix(s, digestPrefix)
	if !ok {
		return "", fmt.Errorf("blob: digest %q: want prefix %q", s, digestPrefix)
	}
	if len(h) != 2*sha256.Size {
		return "", fmt.Errorf("blob: digest %q: want %d hex characters, got %d", s, 2*sha256.Size, len(h))
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("blob: digest %q: not lowercase hex", s)
		}
	}
	return Digest(s), nil
}

// Hex returns the 64 hex characters of d without the "sha256:" prefix.
func (d Digest) Hex() string { return strings.TrimPrefix(string(d), digestPrefix) }

// String returns d as text.
func (d Digest) String() string { return string(d) }

// verify returns an error wrapping ErrCorrupt when data does not hash to d.
func verify(d Digest, data []byte) error {
	if got := DigestOf(data); got != d {
		return fmt.Errorf("blob %s: %w (content hashes to %s)", d, ErrCorrupt, got)
	}
	return nil
}
