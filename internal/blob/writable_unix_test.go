//go:build unix

package blob

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// A directory that takes a block says so; once the process has no file
// descriptor left (the soft limit lowered to the lowest free one), it takes
// none, and the error says why. No probe file stays behind.
func TestWritableSaysWhenContentCannotBeStored(t *testing.T) {
	s, err := NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Writable(); err != nil {
		t.Fatalf("an empty directory: %v", err)
	}
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	probe, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	lowest := probe.Fd()
	probe.Close()
	short := limit
	short.Cur = uint64(lowest)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &short); err != nil {
		t.Fatal(err)
	}
	err = s.Writable()
	if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, syscall.EMFILE) {
		t.Errorf("out of file descriptors: %v, want EMFILE", err)
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != 0 {
		t.Errorf("the probe left %v", entries)
	}
}
