package database_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mailroom/mailroom/internal/database"
)

// A file's error (a blob directory missing, not a directory, full or
// denied) is no database failing, though Go's file errors answer Timeout
// as network errors do: a client told the database cannot be reached
// would wait for nothing, and an operator look at the wrong server.
func TestFileErrorsAreNotTheDatabaseUnreachable(t *testing.T) {
	_, missing := os.Open(filepath.Join(t.TempDir(), "gone", "blob"))
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, underFile := os.Create(filepath.Join(notDir, "blob"))
	full := &fs.PathError{Op: "write", Path: "/blobs/x", Err: syscall.ENOSPC}
	for _, err := range []error{missing, underFile, full, fmt.Errorf("blob: put: %w", full)} {
		if err == nil {
			t.Fatal("expected a file error")
		}
		if database.Unreachable(err) {
			t.Errorf("%v: counted as the database unreachable", err)
		}
	}
	// A connection's failure still is.
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if !database.Unreachable(fmt.Errorf("query: %w", refused)) {
		t.Error("a refused connection is not counted as the database unreachable")
	}
	if database.Unreachable(errors.New("syntax error")) {
		t.Error("any error is counted as the database unreachable")
	}
}
