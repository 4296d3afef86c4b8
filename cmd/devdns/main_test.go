package main

import (
	"net"
	"os"
	"strings"
	"testing"
)

// The README walkthrough starts devdns on its default address and points
// MAILROOM_DNS_RESOLVERS at it. On a machine whose mDNS responder holds 5353
// (avahi, mDNSResponder, Chrome), devdns could not bind there, so the
// walkthrough would stop at "address already in use".
func TestTheDefaultAddressIsClearOfMDNSAndIsTheOneTheREADMEUses(t *testing.T) {
	_, port, err := net.SplitHostPort(defaultAddr)
	if err != nil {
		t.Fatal(err)
	}
	if port == "5353" || port == "5355" {
		t.Errorf("devdns listens on %s by default, a port mDNS or LLMNR responders hold", defaultAddr)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "MAILROOM_DNS_RESOLVERS="+defaultAddr) {
		t.Errorf("README does not point MAILROOM_DNS_RESOLVERS at devdns's default %s", defaultAddr)
	}
}
