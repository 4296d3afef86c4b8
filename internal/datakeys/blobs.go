package datakeys

import (
	"bytes"
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
)

// Blobs keeps emails' bodies and attachments in a blob store, each sealed
// with its email's data key. A sealed blob is the email's own (the nonce
// makes every ciphertext unique), so deleting it never takes another
// email's content with it, and destroying the key erases it wherever a copy
// of it lies.
type Blobs struct {
	store blob.Store
	keys  *Keyring
}

// NewBlobs returns the sealed content of store under keys.
func NewBlobs(store blob.Store, keys *Keyring) *Blobs { return &Blobs{store: store, keys: keys} }

// sealedMagic starts every sealed blob. Blobs written before content was
// sealed are the plain bytes, which do not start with it.
var sealedMagic = []byte("\x00mrsealed1\x00")

// bindBlob binds a blob's ciphertext to its email, so it cannot be passed
// off as another email's.
func bindBlob(emailID string) string { return "blob:" + emailID }

// Put seals each of parts with the email's key, created for accountID
// when the email has none yet, and stores them side by side: each write
// waits for the disk, and an email's parts need not wait for each other.
// The digests name the sealed bytes, one for one with parts.
//
// Put stores all of the parts or none: when one fails, the others are
// deleted again, since the caller, given no digests, could not name them
// in any event, and content no event names is out of reach of retention
// and erasure.
func (b *Blobs) Put(ctx context.Context, emailID, accountID string, parts ...[]byte) ([]blob.Digest, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	key, err := b.keys.Ensure(ctx, codec.KeyID(emailID), accountID)
	if err != nil {
		return nil, err
	}
	digests := make([]blob.Digest, len(parts))
	g, gctx := errgroup.WithContext(ctx)
	for i, data := range parts {
		g.Go(func() error {
			sealed, err := key.Seal(data, bindBlob(emailID))
			if err != nil {
				return err
			}
			sealed = append(bytes.Clone(sealedMagic), sealed...)
			// Named before it is written: a write that fails may have
			// stored it all the same (a reply lost, a cancelled request).
			digests[i] = blob.DigestOf(sealed)
			_, err = b.store.Put(gctx, sealed)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.forget(ctx, digests)
		return nil, err
	}
	return digests, nil
}

// forget deletes what a failed Put may have stored, even when its request
// was cancelled (a client that went away). A sealed blob is this email's
// alone, so no other email loses content. Should a delete fail, the blob
// stays, sealed under the email's key.
func (b *Blobs) forget(ctx context.Context, digests []blob.Digest) {
	ctx = context.WithoutCancel(ctx)
	for _, d := range digests {
		if d != "" {
			_ = b.store.Delete(ctx, d)
		}
	}
}

// Get returns the email's content stored under d, opened with the email's
// key: ErrErased once the key is destroyed. A blob written before sealing
// is returned as it is, unless the email was erased.
func (b *Blobs) Get(ctx context.Context, emailID string, d blob.Digest) ([]byte, error) {
	id := codec.KeyID(emailID)
	keys, err := b.keys.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	key, hasKey := keys[id]
	if hasKey && key.Erased() {
		return nil, ErrErased
	}
	stored, err := b.store.Get(ctx, d)
	if err != nil {
		return nil, err
	}
	sealed, isSealed := bytes.CutPrefix(stored, sealedMagic)
	if !isSealed {
		return stored, nil
	}
	if !hasKey {
		return nil, fmt.Errorf("blob %s of email %s: %w", d, emailID, ErrNoKey)
	}
	plain, err := key.Open(sealed, bindBlob(emailID))
	if err != nil {
		return nil, fmt.Errorf("blob %s of email %s: %w", d, emailID, err)
	}
	return plain, nil
}

// Delete removes the blobs; those already gone are not an error. A blob
// written before sealing may hold the same bytes for several emails, and
// goes for all of them.
func (b *Blobs) Delete(ctx context.Context, digests ...blob.Digest) error {
	for _, d := range digests {
		if err := b.store.Delete(ctx, d); err != nil {
			return err
		}
	}
	return nil
}
