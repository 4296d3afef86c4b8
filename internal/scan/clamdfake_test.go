package scan

// This file is a FAKE clamd, for tests only: a TCP (or unix socket) server
// speaking the part of ClamAV's clamd protocol that Scanner uses — PING and
// INSTREAM, with the "z" (NUL-terminated) and "n" (newline-terminated)
// command prefixes. It does not scan anything: content containing
// fakeVirusMarker is reported as fakeVirusName FOUND, everything else as OK.
// Like clamd, it enforces a stream size limit and answers
// "INSTREAM size limit exceeded. ERROR" beyond it.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	fakeVirusMarker = "FAKE-CLAMD-VIRUS-MARKER"
	fakeVirusName   = "Fake.Test.Marker-1"
)

type fakeClamd struct {
	ln        net.Listener
	maxStream int
	// stall makes the fake accept a command and never answer.
	stall atomic.Bool
	// scans counts INSTREAM commands received.
	scans atomic.Int64

	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// newFakeClamd listens on network ("tcp" → 127.0.0.1:0, "unix" → a socket
// in a temporary directory) and serves until the test ends. Its Addr is in
// the form New accepts.
func newFakeClamd(t *testing.T, network string) *fakeClamd {
	t.Helper()
	var ln net.Listener
	var err error
	switch network {
	case "tcp":
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	case "unix":
		ln, err = net.Listen("unix", shortSocketPath(t))
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeClamd{ln: ln, maxStream: 1 << 20, open: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.acceptLoop()
	t.Cleanup(f.close)
	return f
}

func (f *fakeClamd) Addr() string {
	if f.ln.Addr().Network() == "unix" {
		return "unix:" + f.ln.Addr().String()
	}
	return f.ln.Addr().String()
}

func (f *fakeClamd) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.open {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeClamd) acceptLoop() {
	defer f.wg.Done()
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.open[conn] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer func() {
				f.mu.Lock()
				delete(f.open, conn)
				f.mu.Unlock()
				_ = conn.Close()
			}()
			f.serve(conn)
		}()
	}
}

// serve handles one command, as clamd does outside an IDSESSION.
func (f *fakeClamd) serve(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	prefix, err := br.ReadByte()
	if err != nil {
		return
	}
	var delim byte
	switch prefix {
	case 'z':
		delim = 0
	case 'n':
		delim = '\n'
	default:
		_, _ = io.WriteString(conn, "UNKNOWN COMMAND\n")
		return
	}
	cmd, err := br.ReadString(delim)
	if err != nil {
		return
	}
	cmd = cmd[:len(cmd)-1]
	reply := func(s string) { _, _ = io.WriteString(conn, s+string(delim)) }
	switch cmd {
	case "PING":
		reply("PONG")
	case "INSTREAM":
		f.scans.Add(1)
		content, err := f.readStream(br)
		if f.stall.Load() {
			_, _ = io.Copy(io.Discard, conn) // hold the connection open, say nothing
			return
		}
		switch {
		case errors.Is(err, errStreamTooLong):
			reply("INSTREAM size limit exceeded. ERROR")
		case err != nil:
			return
		case bytes.Contains(content, []byte(fakeVirusMarker)):
			reply("stream: " + fakeVirusName + " FOUND")
		default:
			reply("stream: OK")
		}
	default:
		reply("UNKNOWN COMMAND")
	}
}

var errStreamTooLong = errors.New("stream too long")

// readStream reads 4-byte big-endian length-prefixed chunks up to a zero
// length, the whole stream kept so a marker split across chunks is found.
func (f *fakeClamd) readStream(r io.Reader) ([]byte, error) {
	var content bytes.Buffer
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n == 0 {
			return content.Bytes(), nil
		}
		if content.Len()+n > f.maxStream {
			return nil, errStreamTooLong
		}
		if _, err := io.CopyN(&content, r, int64(n)); err != nil {
			return nil, err
		}
	}
}
