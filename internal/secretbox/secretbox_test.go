package secretbox

import (
	"bytes"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	b, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("-----BEGIN PRIVATE KEY-----")
	sealed := b.Seal(secret, "domain-1")
	if strings.Contains(sealed, "PRIVATE") || sealed == b.Seal(secret, "domain-1") {
		t.Fatalf("sealed value leaks or repeats: %s", sealed)
	}
	got, err := b.Open(sealed, "domain-1")
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := b.Open(sealed, "domain-2"); err == nil {
		t.Fatal("opened under another context")
	}
	other, _ := New(bytes.Repeat([]byte{8}, 32))
	if _, err := other.Open(sealed, "domain-1"); err == nil {
		t.Fatal("opened with another key")
	}
	if _, err := New(key[:16]); err == nil {
		t.Fatal("accepted a short key")
	}
}
