// Package credential mints the secrets Mailroom hands out (API keys,
// management tokens) and the one-way hashes it keeps of them.
package credential

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"strings"
)

const (
	// APIKeyPrefix starts every API key.
	APIKeyPrefix = "mr_"
	// TokenPrefix starts every management token.
	TokenPrefix = "mrt_"
	// randomLength base62 characters follow the prefix.
	randomLength = 40
	base62       = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// Minted is a new secret with what may be stored of it.
type Minted struct {
	Secret  string // shown once, never stored
	Hash    string // SHA-256, hex
	Preview string // prefix, first 6 characters, "..."
}

// Mint creates a secret with prefix.
func Mint(prefix string) Minted {
	var b strings.Builder
	b.WriteString(prefix)
	max := big.NewInt(int64(len(base62)))
	for range randomLength {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			panic("credential: no randomness: " + err.Error())
		}
		b.WriteByte(base62[n.Int64()])
	}
	s := b.String()
	return Minted{Secret: s, Hash: Hash(s), Preview: s[:len(prefix)+6] + "..."}
}

// Hash is the stored form of a secret. The secrets carry 238 bits of
// randomness, so a fast hash is enough: there is nothing to brute-force.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// WellFormed reports whether s looks like a secret with prefix, before any
// lookup: prefix followed by at least 32 base62 characters.
func WellFormed(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) < 32 || len(rest) > 128 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(base62, rest[i]) < 0 {
			return false
		}
	}
	return true
}
