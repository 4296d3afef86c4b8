package datakeys

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/mailmsg"
	"github.com/mailroom/mailroom/internal/secretbox"
)

// AddressKeys turns an address into a keyed hash: the same address of the
// same account always gives the same key, so suppressions and erasure
// requests find it, but the key does not give the address back, and
// without the master key nobody can test a guess against it.
type AddressKeys struct{ secret []byte }

// NewAddressKeys derives the hashing secret from a master key. Keyring's
// AddressKeys keeps the secret of a database, so that it outlives a change
// of master key.
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

// addressSecretID is the data_keys row that keeps the address keys'
// secret, wrapped like a data key (and rewrapped with them).
const addressSecretID = "mailroom:address-keys"

// AddressKeys returns the database's address keys. Suppressions and
// erasure requests find addresses by these keys, so their secret must
// outlive a change of master key: it is kept wrapped beside the data keys.
// A database without it takes the secret derived from the master key it
// has been used with: of masterKeys (the current key first), the one that
// opens its data keys, as earlier releases derived it; a new database,
// from the current key.
func (r *Keyring) AddressKeys(ctx context.Context, masterKeys ...[]byte) (AddressKeys, error) {
	used, err := r.keyInUse(ctx, masterKeys)
	if err != nil {
		return AddressKeys{}, err
	}
	derived, err := NewAddressKeys(used)
	if err != nil {
		return AddressKeys{}, err
	}
	var wrapped *string
	for range 3 { // as in Ensure: a racing insert may hide its row once
		err = r.pool.QueryRow(ctx, ensureKey, addressSecretID, nil, r.box.Seal(derived.secret, wrapContext(addressSecretID))).Scan(&wrapped)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return AddressKeys{}, fmt.Errorf("address keys: %w", err)
	}
	if wrapped == nil {
		return AddressKeys{}, errors.New("address keys: their secret was destroyed")
	}
	secret, err := r.box.Open(*wrapped, wrapContext(addressSecretID))
	if err != nil {
		return AddressKeys{}, fmt.Errorf("address keys: %w", ErrWrongMasterKey)
	}
	return AddressKeys{secret: secret}, nil
}

// keyInUse is the key of masterKeys that opens the database's data keys
// (the address keys' secret aside); the first when there are none.
func (r *Keyring) keyInUse(ctx context.Context, masterKeys [][]byte) ([]byte, error) {
	var id, wrapped string
	err := r.pool.QueryRow(ctx, `SELECT id, wrapped FROM data_keys WHERE wrapped IS NOT NULL AND id <> $1 LIMIT 1`, addressSecretID).Scan(&id, &wrapped)
	if errors.Is(err, pgx.ErrNoRows) {
		return masterKeys[0], nil
	}
	if err != nil {
		return nil, fmt.Errorf("data keys: %w", err)
	}
	for _, k := range masterKeys {
		if box, err := secretbox.New(k); err == nil {
			if _, err := box.Open(wrapped, wrapContext(id)); err == nil {
				return k, nil
			}
		}
	}
	return nil, ErrWrongMasterKey
}
