package database

import (
	"errors"
	"io"
	"io/fs"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err is the database's connection failing
// (refused, reset, timed out, the server shutting down, starting or full)
// or the server unable to take writes for a while (disk full, out of
// memory, read-only, a statement cancelled by a timeout), rather than a
// statement failing: a passing outage, which a client should retry and a
// starting process wait out, not a bug.
func Unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300", // admin/crash shutdown, cannot connect now, too many connections
			"53100", "53200", "25006", "57014": // disk full, out of memory, read-only, statement cancelled (a timeout)
			return true
		}
		return false
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		// A file's error (blob directory missing, disk full, permission):
		// *fs.PathError has Timeout and Temporary, so it reads as a
		// net.Error, but it is no database of ours failing.
		return false
	}
	return errors.As(err, &connect) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// Down reports whether err says the server cannot be reached or does not
// take connections yet: refused, reset, closed, timed out, a host name that
// does not resolve (yet), the server starting, shutting down, recovering or
// out of connection slots. (A server stopped in immediate mode or crashing
// warns its sessions and closes them: the client sees a closed connection.) That is what a process started with or before
// PostgreSQL sees, and waits out. Refused credentials or TLS, a statement
// timed out or a read-only server are not: waiting would not cure them.
func Down(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300":
			return true
		}
		return false
	}
	var netErr net.Error
	// Not io.EOF: a TLS setting the server cannot meet ends that way.
	return errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed)
}
