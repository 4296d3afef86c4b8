// Package secretbox encrypts the secrets Mailroom must be able to read back
// (DKIM private keys, webhook signing secrets, data keys) with AES-256-GCM
// under the master key, so that neither events nor read models hold them in
// the clear.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
)

// prefix versions the format.
const prefix = "v1:"

// Box seals with the current master key and opens with it or with any
// previous one, so that the master key can be replaced while values sealed
// under the old one are still read (and re-sealed over time).
type Box struct{ aeads []cipher.AEAD } // the current key's first

// New returns a Box sealing under key (32 bytes) and opening with key or
// any of previous.
func New(key []byte, previous ...[]byte) (*Box, error) {
	b := &Box{}
	for _, k := range append([][]byte{key}, previous...) {
		if len(k) != 32 {
			return nil, errors.New("secretbox: key must be 32 bytes")
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		b.aeads = append(b.aeads, aead)
	}
	return b, nil
}

// Seal encrypts plaintext under the current key, binding it to context
// (for example the owning resource's id) so a sealed value cannot be moved
// to another resource.
func (b *Box) Seal(plaintext []byte, context string) string {
	aead := b.aeads[0]
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	out := aead.Seal(nonce, nonce, plaintext, []byte(context))
	return prefix + base64.RawStdEncoding.EncodeToString(out)
}

// ErrCannotOpen means no key of the Box opens the value for its context.
var ErrCannotOpen = errors.New("secretbox: cannot open (wrong key or context)")

// Open decrypts a value sealed under the current key or a previous one,
// with the same context.
func (b *Box) Open(sealed, context string) ([]byte, error) {
	plain, _, err := b.open(sealed, context)
	return plain, err
}

// Reseal returns sealed as sealed under the current key: the value itself
// when it is already, a new sealing of its content otherwise (changed).
func (b *Box) Reseal(sealed, context string) (resealed string, changed bool, err error) {
	plain, current, err := b.open(sealed, context)
	if err != nil || current {
		return sealed, false, err
	}
	return b.Seal(plain, context), true, nil
}

// Current reports whether the current key opens sealed: false for a value
// opened by a previous key only; ErrCannotOpen when no key opens it.
func (b *Box) Current(sealed, context string) (bool, error) {
	_, current, err := b.open(sealed, context)
	return current, err
}

// open also says whether the current key opened it.
func (b *Box) open(sealed, context string) ([]byte, bool, error) {
	raw, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, false, errors.New("secretbox: unknown format")
	}
	data, err := base64.RawStdEncoding.DecodeString(raw)
	n := b.aeads[0].NonceSize()
	// Shorter than a nonce and a tag, no key could open it.
	if err != nil || len(data) < n+b.aeads[0].Overhead() {
		return nil, false, errors.New("secretbox: malformed value")
	}
	for i, aead := range b.aeads {
		if plain, err := aead.Open(nil, data[:n], data[n:], []byte(context)); err == nil {
			return plain, i == 0, nil
		}
	}
	return nil, false, ErrCannotOpen
}
