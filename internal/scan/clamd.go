package scan

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// clamdChunkSize is the INSTREAM chunk size. clamd accepts any chunk up to
// its StreamMaxLength; 64 KiB keeps memory and syscalls modest.
const clamdChunkSize = 64 << 10

// maxClamdReply bounds a reply line; real replies are under 200 bytes.
const maxClamdReply = 4 << 10

// clamdClient speaks clamd's INSTREAM protocol over TCP or a unix socket,
// one connection per command (clamd closes the connection after a
// non-session command anyway).
type clamdClient struct {
	network, addr string
	timeout       time.Duration
}

// newClamdClient parses "unix:/path", "unix:///path", "tcp://host:port" or
// "host:port".
func newClamdClient(addr string, timeout time.Duration) *clamdClient {
	c := &clamdClient{network: "tcp", addr: addr, timeout: timeout}
	switch {
	case strings.HasPrefix(addr, "unix://"):
		c.network, c.addr = "unix", strings.TrimPrefix(addr, "unix://")
	case strings.HasPrefix(addr, "unix:"):
		c.network, c.addr = "unix", strings.TrimPrefix(addr, "unix:")
	case strings.HasPrefix(addr, "tcp://"):
		c.addr = strings.TrimPrefix(addr, "tcp://")
	}
	return c
}

// ErrClamd marks every clamd failure (unreachable, timed out, protocol or
// scan error), so callers can tell "scanner broken, retry later" from a
// verdict.
var ErrClamd = errors.New("clamd")

// ErrTooLarge is clamd's answer to content over its stream size limit
// (StreamMaxLength): scanning it again cannot succeed, so the content is
// refused rather than retried. It wraps ErrClamd.
var ErrTooLarge = fmt.Errorf("%w: content over the scanner's stream size limit", ErrClamd)

func (c *clamdClient) fail(format string, args ...any) error {
	return fmt.Errorf("%w %s %s: %s", ErrClamd, c.network, c.addr, fmt.Sprintf(format, args...))
}

// dial connects and bounds the whole exchange by c.timeout and ctx: the
// connection deadline is the earlier of the two, and cancelling ctx aborts
// blocked I/O at once. The returned stop must be called when done.
func (c *clamdClient) dial(ctx context.Context) (net.Conn, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	var d net.Dialer
	conn, err := d.DialContext(ctx, c.network, c.addr)
	if err != nil {
		cancel()
		return nil, nil, c.fail("connect: %v", err)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stopAfter := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return conn, func() {
		stopAfter()
		cancel()
		_ = conn.Close()
	}, nil
}

// scan sends content with zINSTREAM and returns the signature name clamd
// found, or "" when the content is clean.
func (c *clamdClient) scan(ctx context.Context, content []byte) (string, error) {
	conn, stop, err := c.dial(ctx)
	if err != nil {
		return "", err
	}
	defer stop()

	werr := writeInstream(conn, content)
	// Read the reply even when the upload failed: clamd answers
	// "INSTREAM size limit exceeded. ERROR" and closes the connection when
	// the stream is over its StreamMaxLength, which surfaces here as a
	// broken pipe.
	reply, rerr := readReply(conn)
	if rerr != nil {
		if ctx.Err() != nil {
			return "", c.fail("scan: %v", context.Cause(ctx))
		}
		if errors.Is(rerr, os.ErrDeadlineExceeded) {
			return "", c.fail("no verdict within %s", c.timeout)
		}
		if werr != nil {
			return "", c.fail("send stream: %v", werr)
		}
		return "", c.fail("read reply: %v", rerr)
	}
	return c.parseReply(reply)
}

// writeInstream writes "zINSTREAM\0", the content as length-prefixed chunks
// (4-byte big-endian length) and a zero-length terminator.
func writeInstream(w io.Writer, content []byte) error {
	bw := bufio.NewWriterSize(w, clamdChunkSize+4)
	if _, err := bw.WriteString("zINSTREAM\x00"); err != nil {
		return err
	}
	var hdr [4]byte
	for len(content) > 0 {
		n := min(len(content), clamdChunkSize)
		binary.BigEndian.PutUint32(hdr[:], uint32(n))
		if _, err := bw.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := bw.Write(content[:n]); err != nil {
			return err
		}
		content = content[n:]
	}
	binary.BigEndian.PutUint32(hdr[:], 0)
	if _, err := bw.Write(hdr[:]); err != nil {
		return err
	}
	return bw.Flush()
}

// readReply reads one NUL-terminated reply (the "z" command prefix asks
// clamd for NUL-terminated replies); a reply cut short by EOF is accepted.
func readReply(r io.Reader) (string, error) {
	var buf bytes.Buffer
	b := make([]byte, 512)
	for buf.Len() <= maxClamdReply {
		n, err := r.Read(b)
		if i := bytes.IndexByte(b[:n], 0); i >= 0 {
			buf.Write(b[:i])
			return buf.String(), nil
		}
		buf.Write(b[:n])
		if err == io.EOF && buf.Len() > 0 {
			return buf.String(), nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", errors.New("reply too long")
}

// parseReply interprets "stream: OK", "stream: <name> FOUND" and
// "<message> ERROR".
func (c *clamdClient) parseReply(reply string) (string, error) {
	reply = strings.TrimSpace(reply)
	switch {
	case strings.HasSuffix(reply, " FOUND"):
		name, ok := strings.CutPrefix(strings.TrimSuffix(reply, " FOUND"), "stream: ")
		if !ok {
			if i := strings.LastIndex(name, ": "); i >= 0 {
				name = name[i+2:]
			}
		}
		if name = strings.TrimSpace(name); name == "" {
			return "", c.fail("malformed reply %q", reply)
		}
		return name, nil
	case strings.HasSuffix(reply, " ERROR") && strings.Contains(reply, "size limit exceeded"):
		return "", fmt.Errorf("%w (%s %s: %s)", ErrTooLarge, c.network, c.addr, reply)
	case strings.HasSuffix(reply, " ERROR"):
		return "", c.fail("%s", reply)
	case strings.HasSuffix(reply, ": OK") || reply == "OK":
		return "", nil
	}
	return "", c.fail("unexpected reply %q", reply)
}

// ping sends zPING and expects PONG.
func (c *clamdClient) ping(ctx context.Context) error {
	conn, stop, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if _, err := io.WriteString(conn, "zPING\x00"); err != nil {
		return c.fail("ping: %v", err)
	}
	reply, err := readReply(conn)
	if err != nil {
		return c.fail("ping: %v", err)
	}
	if strings.TrimSpace(reply) != "PONG" {
		return c.fail("ping: unexpected reply %q", reply)
	}
	return nil
}
