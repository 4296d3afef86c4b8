// Package nettest gives tests network peers that misbehave as real ones
// do when a host hangs or drops packets.
package nettest

import (
	"net"
	"sync"
	"testing"
)

// Silent listens on a local port, accepts every connection and never
// says a word, like a server that hangs or an address whose packets are
// dropped after a failover. It returns the address; the listener and the
// connections close when t ends.
func Silent(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}
