//go:build unix

package blob

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/mailroom/mailroom/internal/fdtest"
)

// A directory that takes a block says so; once the process has no file
// descriptor left, it takes none, and the error says why. No probe file stays behind.
func TestWritableSaysWhenContentCannotBeStored(t *testing.T) {
	s, err := NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Writable(); err != nil {
		t.Fatalf("an empty directory: %v", err)
	}
	fdtest.Exhausted(t, func() { err = s.Writable() })
	if !errors.Is(err, syscall.EMFILE) {
		t.Errorf("out of file descriptors: %v, want EMFILE", err)
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != 0 {
		t.Errorf("the probe left %v", entries)
	}
}
