package secretbox

import (
	"bytes"
	"encoding/base64"
	"errors"
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

// After a change of master key, values sealed under the previous one still
// open, and Reseal moves them under the new one; a box without the
// previous key then opens them too.
func TestPreviousKeys(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	before, _ := New(oldKey)
	sealed := before.Seal([]byte("whsec_x"), "endpoint-1")

	during, err := New(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := during.Open(sealed, "endpoint-1"); err != nil || string(got) != "whsec_x" {
		t.Fatalf("open under the previous key: %q %v", got, err)
	}
	resealed, changed, err := during.Reseal(sealed, "endpoint-1")
	if err != nil || !changed || resealed == sealed {
		t.Fatalf("reseal: %v %v", changed, err)
	}
	if again, changed, err := during.Reseal(resealed, "endpoint-1"); err != nil || changed || again != resealed {
		t.Fatalf("reseal of a current value: %v %v", changed, err)
	}
	if _, _, err := during.Reseal(sealed, "endpoint-2"); err == nil {
		t.Fatal("resealed under another context")
	}

	after, _ := New(newKey)
	if got, err := after.Open(resealed, "endpoint-1"); err != nil || string(got) != "whsec_x" {
		t.Fatalf("open with the new key alone: %q %v", got, err)
	}
	if _, err := after.Open(sealed, "endpoint-1"); err == nil {
		t.Fatal("the new key alone opened a value sealed under the old one")
	}
	if _, err := before.Open(during.Seal([]byte("x"), "c"), "c"); err == nil {
		t.Fatal("the old key opened a value sealed under the new one")
	}
}

// A stored value that is not a sealed secret is an error, never a panic
// or an empty secret.
func TestMalformedSealedValuesAreErrors(t *testing.T) {
	b, err := New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	good := b.Seal([]byte("whsec_x"), "w1")
	prefix := good[:strings.Index(good, ":")+1]
	for _, v := range []string{"plain", prefix + "!!!", prefix + base64.RawStdEncoding.EncodeToString([]byte("short"))} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Open(%q) panicked: %v", v, r)
				}
			}()
			if p, err := b.Open(v, "w1"); err == nil {
				t.Errorf("Open(%q) = %q, nil", v, p)
			}
		}()
	}
	// Too short to hold a nonce and a tag, no key could open it: it is
	// malformed, not a value sealed under a key this Box was not given.
	for _, n := range []int{0, 12, 12 + 15} {
		v := prefix + base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{1}, n))
		if _, err := b.Open(v, "w1"); err == nil || errors.Is(err, ErrCannotOpen) {
			t.Errorf("Open of %d bytes: %v, want a malformed value", n, err)
		}
	}
	if _, err := b.Open(prefix+base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 12+16)), "w1"); !errors.Is(err, ErrCannotOpen) {
		t.Errorf("Open of a nonce and a tag that no key opens: %v, want ErrCannotOpen", err)
	}
	if cur, err := b.Current(good, "w1"); err != nil || !cur {
		t.Errorf("Current of a value sealed now: %v %v", cur, err)
	}
}
