package egress

import (
	"net/netip"
	"net/url"
	"testing"
)

// FuzzCheckStatic checks the rules a customer's URL (a webhook endpoint, an
// attachment path) meets before any lookup: a host that is an IP address
// as written, in any form a resolver reads as one, is judged here, and one
// passed on to DNS is a name.
func FuzzCheckStatic(f *testing.F) {
	for _, s := range []string{
		"https://hooks.example.com/mailroom",
		"https://hooks.example.com:8443/x?y=1#z",
		"https://8.8.8.8/", "https://127.0.0.1/", "https://127.1/", "https://2130706433/",
		"https://0x7f.0.0.1/", "https://0177.0.0.1/", "https://0x7f000001/", "https://127.0.0.1./",
		"https://[::1]/", "https://[::ffff:127.0.0.1]/", "https://[::ffff:7f00:1]/", "https://[fe80::1%25eth0]/",
		"https://[2001:4860:4860::8888]:443/", "https://[64:ff9b::7f00:1]/", "https://[::127.0.0.1]/",
		"https://169.254.169.254/latest/meta-data", "https://168.63.129.16/", "https://100.64.0.1/",
		"https://%31%32%37.0.0.1/", "https://LOCALHOST/", "https://a.localhost./", "https://printer.local/",
		"https://intranet/", "https://user:pw@example.com/", "http://example.com/", "https:example.com",
		"https://example.com:0/", "https://example.com:65536/", "https://1.2.3.4.5/", "https://256.0.0.1/",
		"https://0x/", "https://09.0.0.1/", "https://1e1.0.0.1/", "https:///path", "HTTPS://Example.COM/",
	} {
		f.Add(s)
	}
	var p Policy
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		host, ip, err := p.checkStatic(u)
		literal, litErr := netip.ParseAddr(u.Hostname())
		if err != nil {
			return
		}
		if ip.IsValid() {
			if p.judge(ip) != nil {
				t.Fatalf("%q: accepted address %v that judge refuses", raw, ip)
			}
			if litErr == nil && literal.WithZone("").Unmap() != ip.WithZone("").Unmap() {
				t.Fatalf("%q: judged %v, but the host is %v", raw, ip, literal)
			}
			return
		}
		if litErr == nil {
			t.Fatalf("%q: IP address %v passed on as a name %q", raw, literal, host)
		}
		if a, ok := parseIPv4Host(host); ok {
			t.Fatalf("%q: host %q reads as IPv4 %v, passed on as a name", raw, host, a)
		}
		if u.Scheme != "https" || u.User != nil || host == "" {
			t.Fatalf("%q accepted", raw)
		}
	})
}
