package blob

import (
	"errors"
	"strings"
	"testing"
)

func TestDigestOf(t *testing.T) {
	// sha256("") and sha256("abc") from FIPS 180-2.
	cases := map[string]Digest{
		"":    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	}
	for in, want := range cases {
		if got := DigestOf([]byte(in)); got != want {
			t.Errorf("DigestOf(%q) = %s, want %s", in, got, want)
		}
	}
	d := DigestOf([]byte("abc"))
	if d.Hex() != strings.TrimPrefix(string(d), "sha256:") || len(d.Hex()) != 64 {
		t.Errorf("Hex() = %q", d.Hex())
	}
}

func TestParseDigest(t *testing.T) {
	good := string(DigestOf([]byte("x")))
	if d, err := ParseDigest(good); err != nil || string(d) != good {
		t.Fatalf("ParseDigest(%q) = %q, %v", good, d, err)
	}
	bad := []string{
		"",
		strings.TrimPrefix(good, "sha256:"), // no prefix
		"sha1:" + strings.TrimPrefix(good, "sha256:"), // other algorithm
		"SHA256:" + strings.TrimPrefix(good, "sha256:"),
		strings.ToUpper(good[:10]) + good[10:], // uppercase hex is not canonical
		"sha256:" + strings.ToUpper(good[7:]),
		good[:len(good)-1],       // short
		good + "0",               // long
		good[:len(good)-1] + "g", // not hex
		"sha256:../../etc/passwd",
	}
	for _, s := range bad {
		if _, err := ParseDigest(s); err == nil {
			t.Errorf("ParseDigest(%q): want error", s)
		}
	}
}

func TestVerify(t *testing.T) {
	d := DigestOf([]byte("hello"))
	if err := verify(d, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := verify(d, []byte("hellO")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify of changed bytes = %v, want ErrCorrupt", err)
	}
}
