package datakeys

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/mailroom/mailroom/internal/mailmsg"
)

// AddressKeys turns an address into a keyed hash: the same address of the
// same account always gives the same key, so suppressions and erasure
// requests find it, but the key does not give the address back, and
// without the master key nobody can test a guess against it.
type AddressKeys struct{ secret []byte }

// NewAddressKeys derives the hashing secret from the master key.
func NewAddressKeys(masterKey []byte) (AddressKeys, error) {
	secret, err := hkdf.Key(sha256.New, masterKey, nil, "mailroom address keys", 32)
	if err != nil {
		return AddressKeys{}, err
	}
	return AddressKeys{secret: secret}, nil
}

// Of is the key of address (the address alone, no display name) in
// accountID. Addresses compare without regard to case, and an
// internationalised domain in Unicode or in punycode is one address
// (mailmsg.WireAddress).
func (a AddressKeys) Of(accountID, address string) string {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte(accountID))
	m.Write([]byte{0})
	m.Write([]byte(strings.ToLower(mailmsg.WireAddress(strings.TrimSpace(address)))))
	return "ak1:" + hex.EncodeToString(m.Sum(nil))
}

// OfRecipients is the key of each recipient's address (mailmsg.AddressOf),
// one for one.
func (a AddressKeys) OfRecipients(accountID string, recipients []string) []string {
	out := make([]string, len(recipients))
	for i, r := range recipients {
		out[i] = a.Of(accountID, mailmsg.AddressOf(r))
	}
	return out
}
