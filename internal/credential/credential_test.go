package credential

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// A minted secret is its prefix and 40 base62 characters, new each time;
// what is kept of it is its SHA-256 and a preview of its first 6
// characters after the prefix, never more of it.
func TestMintedSecretsAndWhatIsKeptOfThem(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		m := Mint(APIKeyPrefix)
		rest, ok := strings.CutPrefix(m.Secret, APIKeyPrefix)
		if !ok || len(rest) != 40 || strings.Trim(rest, base62) != "" {
			t.Fatalf("secret %q is not mr_ and 40 base62 characters", m.Secret)
		}
		if seen[m.Secret] {
			t.Fatalf("secret %q minted twice", m.Secret)
		}
		seen[m.Secret] = true
		sum := sha256.Sum256([]byte(m.Secret))
		if m.Hash != hex.EncodeToString(sum[:]) || m.Hash != Hash(m.Secret) {
			t.Fatalf("hash %q is not the SHA-256 of the secret", m.Hash)
		}
		if m.Preview != m.Secret[:len(APIKeyPrefix)+6]+"..." {
			t.Fatalf("preview %q of %q", m.Preview, m.Secret)
		}
		if !WellFormed(m.Secret, APIKeyPrefix) || WellFormed(m.Secret, TokenPrefix) {
			t.Fatalf("a minted API key is not well formed as one, or is as a token: %q", m.Secret)
		}
	}
	if tok := Mint(TokenPrefix); !strings.HasPrefix(tok.Secret, "mrt_") || !strings.HasPrefix(tok.Preview, "mrt_") || !WellFormed(tok.Secret, TokenPrefix) {
		t.Errorf("token %q, preview %q", tok.Secret, tok.Preview)
	}
	// Secrets differing in the case of one character are two secrets.
	if Hash("mr_"+strings.Repeat("a", 40)) == Hash("mr_A"+strings.Repeat("a", 39)) {
		t.Error("hash ignores case")
	}
}

// A secret is well formed with 32 to 128 base62 characters after its
// prefix, and nothing else; anything else is refused before any lookup.
func TestWellFormedSecrets(t *testing.T) {
	for _, s := range []string{
		"mr_" + strings.Repeat("a", 32),
		"mr_" + strings.Repeat("Z9", 64),
	} {
		if !WellFormed(s, APIKeyPrefix) {
			t.Errorf("WellFormed(%q) = false", s)
		}
	}
	for _, s := range []string{
		"",
		"mr_",
		"mr_" + strings.Repeat("a", 31),
		"mr_" + strings.Repeat("a", 129),
		"MR_" + strings.Repeat("a", 40),
		"xmr_" + strings.Repeat("a", 40),
		strings.Repeat("a", 43),
		"mr_" + strings.Repeat("a", 39) + "-",
		"mr_" + strings.Repeat("a", 39) + "_",
		"mr_" + strings.Repeat("a", 39) + " ",
		"mr_" + strings.Repeat("a", 38) + "é",
	} {
		if WellFormed(s, APIKeyPrefix) {
			t.Errorf("WellFormed(%q) = true", s)
		}
	}
}
