// Package dkimkey makes the DKIM keys of sending domains: RSA-2048 pairs with
// a random selector, the private half sealed under the master key.
package dkimkey

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/secretbox"
)

const selectorAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// Bits is the size of every DKIM key Mailroom generates (RSA-2048, as SES
// BYODKIM takes).
const Bits = 2048

// NewSelector returns "mr" and 6 random lowercase alphanumerics.
func NewSelector() string {
	b := make([]byte, 6)
	rand.Read(b)
	for i := range b {
		b[i] = selectorAlphabet[int(b[i])%len(selectorAlphabet)]
	}
	return "mr" + string(b)
}

// context binds a sealed key to its domain and selector.
func context(domainID, selector string) string { return "dkim:" + domainID + ":" + selector }

// Current reports whether k is sealed under box's current master key
// (false: under a previous one); secretbox.ErrCannotOpen when no key of
// box opens it.
func Current(box *secretbox.Box, domainID string, k sendingdomain.Key) (bool, error) {
	return box.Current(k.SealedKey, context(domainID, k.Selector))
}

// Generate makes a key for domainID, sealed with box.
func Generate(box *secretbox.Box, domainID string, now time.Time) (sendingdomain.Key, error) {
	priv, err := rsa.GenerateKey(rand.Reader, Bits)
	if err != nil {
		return sendingdomain.Key{}, fmt.Errorf("dkim key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return sendingdomain.Key{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return sendingdomain.Key{}, err
	}
	sel := NewSelector()
	return sendingdomain.Key{
		Selector:  sel,
		PublicKey: base64.StdEncoding.EncodeToString(pub),
		SealedKey: box.Seal(der, context(domainID, sel)),
		CreatedAt: now,
	}, nil
}

// Open returns the private key of k, which belongs to domainID.
func Open(box *secretbox.Box, domainID string, k sendingdomain.Key) (*rsa.PrivateKey, error) {
	der, err := box.Open(k.SealedKey, context(domainID, k.Selector))
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	rsaKey, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("dkim key: not RSA")
	}
	return rsaKey, nil
}
