// Command devdns is a small DNS server for trying domain verification on a
// development machine: it serves the dns_records of Mailroom domains, read as
// JSON (the body of GET /api/domains/:id, or of GET /api/domains), from files
// or standard input.
//
//	curl -s localhost:8080/api/domains/$ID -H "Authorization: Bearer $TOKEN" | go run ./cmd/devdns
//	MAILROOM_DNS_RESOLVERS=127.0.0.1:5300 make run
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
)

// defaultAddr keeps clear of 5353, where mDNS responders (avahi,
// mDNSResponder, Chrome) listen on many development machines and a plain
// bind fails, and of 5355 (LLMNR, systemd-resolved).
const defaultAddr = "127.0.0.1:5300"

type domainJSON struct {
	Domain     string `json:"domain"`
	DNSRecords []struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Value    string `json:"value"`
		Priority int    `json:"priority"`
	} `json:"dns_records"`
}

func main() {
	addr := flag.String("addr", defaultAddr, "address to serve DNS on (UDP and TCP)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: devdns [-addr host:port] [FILE ...]   (no FILE or - reads standard input)")
		flag.PrintDefaults()
	}
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		files = []string{"-"}
	}
	var records []dnscheck.Record
	for _, f := range files {
		recs, err := read(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "devdns:", err)
			os.Exit(1)
		}
		records = append(records, recs...)
	}
	srv, err := dnstest.StartStandalone(*addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "devdns:", err)
		os.Exit(1)
	}
	defer srv.Close()
	srv.Add(records...)
	for _, r := range records {
		fmt.Printf("%-5s %s  %s\n", r.Type, r.Name, r.Value)
	}
	fmt.Printf("serving %d records on %s (UDP and TCP); Ctrl-C stops\n", len(records), srv.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
}

// read takes one domain object, or a list response {"data": [...]}.
func read(name string) ([]dnscheck.Record, error) {
	var in io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	raw, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	var list struct {
		Data []domainJSON `json:"data"`
	}
	var one domainJSON
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Data) == 0 {
		if err := json.Unmarshal(raw, &one); err != nil || one.Domain == "" {
			return nil, fmt.Errorf("%s: not a domain or a domain list as the API returns them", name)
		}
		list.Data = []domainJSON{one}
	}
	var out []dnscheck.Record
	for _, d := range list.Data {
		for _, r := range d.DNSRecords {
			out = append(out, dnscheck.Record{Type: r.Type, Name: r.Name, Value: r.Value, Priority: r.Priority})
		}
	}
	return out, nil
}
