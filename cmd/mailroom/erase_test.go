package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/pgtest"
)

func TestEraseCommand(t *testing.T) {
	db := pgtest.NewURL(t)
	s := apptest.StartWith(t, apptest.Config(t, db))
	acct, _, key := s.Sender("acme.test")
	send := func(to string) string {
		t.Helper()
		r := s.Do("POST", "/v1/emails/send", key, map[string]any{"from": "billing@acme.test", "to": to, "subject": "hi", "text": "hi"})
		if r.Status != 202 {
			t.Fatalf("send: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	theirs := []string{send("ann@example.org"), send("Ann <ANN@example.org>")}
	kept := send("bob@example.org")
	for _, id := range append(slices.Clone(theirs), kept) {
		for deadline := time.Now().Add(60 * time.Second); s.Do("GET", "/v1/emails/"+id, key, nil).JSON(t)["status"] != "delivered"; {
			if time.Now().After(deadline) {
				t.Fatalf("email %s was not delivered", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Without the server's blob storage at hand it erases nothing: the
	// emails' content would stay behind, recorded as erased.
	// (Another command run there first made the directory, empty.)
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	for range 2 {
		if _, _, err := run(t, "erase", "--account", acct, "--recipient", "ann@example.org",
			"--database-url", db, "--data-dir", s.Config.DataDir, "--blob-dir", elsewhere); err == nil ||
			!strings.Contains(err.Error(), "MAILROOM_BLOB_DIR") {
			t.Fatalf("erase without the blob storage: %v", err)
		}
		if err := os.MkdirAll(elsewhere, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.Do("GET", "/v1/emails/"+theirs[0], key, nil); r.Status != 200 {
		t.Fatalf("an erase refused still erased: %d", r.Status)
	}

	out, _, err := run(t, "erase", "--account", acct, "--recipient", "ann@example.org", "--json",
		"--database-url", db, "--data-dir", s.Config.DataDir, "--blob-dir", s.Config.BlobDir)
	var got struct {
		ID       string   `json:"id"`
		Object   string   `json:"object"`
		Erased   int      `json:"erased"`
		EmailIDs []string `json:"email_ids"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("erase: %q %v", out, err)
	}
	slices.Sort(got.EmailIDs)
	if got.Erased != 2 || got.Object != "erasure" || !slices.Equal(got.EmailIDs, slices.Sorted(slices.Values(theirs))) {
		t.Fatalf("erase printed %+v, want the two emails to ann", got)
	}
	for _, id := range theirs {
		if r := s.Do("GET", "/v1/emails/"+id, key, nil); r.Status != 404 {
			t.Errorf("erased email %s: %d", id, r.Status)
		}
	}
	if r := s.Do("GET", "/v1/emails/"+kept, key, nil); r.Status != 200 {
		t.Errorf("another recipient's email: %d", r.Status)
	}
	// "-" reads the address from standard input, keeping it off the
	// command line.
	carl := send("carl@example.org")
	for deadline := time.Now().Add(60 * time.Second); s.Do("GET", "/v1/emails/"+carl, key, nil).JSON(t)["status"] != "delivered"; {
		if time.Now().After(deadline) {
			t.Fatalf("email %s was not delivered", carl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd := root()
	var stdout bytes.Buffer
	cmd.SetArgs([]string{"erase", "--account", acct, "--recipient", "-", "--json", "--database-url", db,
		"--data-dir", s.Config.DataDir, "--blob-dir", s.Config.BlobDir, "--sandbox-outbox", t.TempDir()})
	cmd.SetIn(strings.NewReader("carl@example.org\n"))
	cmd.SetOut(&stdout)
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(context.Background()); err != nil || !strings.Contains(stdout.String(), carl) {
		t.Fatalf("erase --recipient -: %q %v", stdout.String(), err)
	}
	if r := s.Do("GET", "/v1/emails/"+carl, key, nil); r.Status != 404 {
		t.Errorf("email erased through standard input: %d", r.Status)
	}
	if _, _, err := run(t, "erase", "--account", acct, "--recipient", "not an address", "--database-url", db, "--data-dir", s.Config.DataDir,
		"--blob-dir", s.Config.BlobDir); err == nil || !strings.Contains(err.Error(), "--recipient: is not a valid email address") {
		t.Errorf("erase of a malformed address: %v, want an error naming --recipient", err)
	}
	if _, _, err := run(t, "erase", "--account", "0198a1d0-0000-7000-8000-000000000000", "--recipient", "ann@example.org",
		"--database-url", db, "--data-dir", s.Config.DataDir, "--blob-dir", s.Config.BlobDir); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("erase for an unknown account: %v", err)
	}
}

// An erasure request names one address. Standard input holding several
// (a list piped in) is refused rather than erasing the first alone and
// reporting success for what reads as the whole list.
func TestReadRecipient(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"ann@example.org\n", "ann@example.org", true},
		{"ann@example.org", "ann@example.org", true},
		{"  ann@example.org \r\n\n", "ann@example.org", true},
		{"", "", false},
		{"\n\n", "", false},
		{"ann@example.org\nbob@example.org\n", "", false},
		{"ann@example.org\n\nbob@example.org", "", false},
		{"ann@example.org\n" + strings.Repeat(" ", 5000), "", false},
	} {
		got, err := readRecipient(strings.NewReader(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("readRecipient(%q) = %q, %v; want %q (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
