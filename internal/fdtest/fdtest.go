//go:build unix

// Package fdtest runs test code in a process out of file descriptors, to
// test what a server does then: accept, create and open fail with EMFILE.
package fdtest

import (
	"os"
	"syscall"
	"testing"
)

// Exhausted runs f with the process's soft limit of open files lowered to
// its lowest free descriptor, so that the next one any goroutine opens
// fails with EMFILE, and puts the limit back when f returns or stops the
// test. Tests that use it must not run in parallel with others of their
// package.
func Exhausted(t testing.TB, f func()) {
	t.Helper()
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
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
			t.Fatal(err)
		}
	}()
	f()
}
