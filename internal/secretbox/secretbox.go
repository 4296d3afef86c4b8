// Package secretbox encrypts the secrets Mailroom must be able to read back
// (DKIM private keys, webhook signing secrets) with AES-256-GCM under the
// master key, so that neither events nor read models hold them in the clear.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
)

// prefix versions the format so the master key can be rotated later.
const prefix = "v1:"

// Box seals and opens secrets with one key.
type Box struct{ aead cipher.AEAD }

// New returns a Box for a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, errors.New("secretbox: key must be 32 bytes")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext, binding it to context (for example the owning
// resource's id) so a sealed value cannot be moved to another resource.
func (b *Box) Seal(plaintext []byte, context string) string {
	nonce := make([]byte, b.aead.NonceSize())
	rand.Read(nonce)
	out := b.aead.Seal(nonce, nonce, plaintext, []byte(context))
	return prefix + base64.RawStdEncoding.EncodeToString(out)
}

// Open decrypts a value sealed with the same key and context.
func (b *Box) Open(sealed, context string) ([]byte, error) {
	raw, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, errors.New("secretbox: unknown format")
	}
	data, err := base64.RawStdEncoding.DecodeString(raw)
	if err != nil || len(data) < b.aead.NonceSize() {
		return nil, errors.New("secretbox: malformed value")
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, data[:n], data[n:], []byte(context))
	if err != nil {
		return nil, errors.New("secretbox: cannot open (wrong key or context)")
	}
	return plain, nil
}
