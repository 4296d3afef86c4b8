package connstr

import "testing"

func TestMisplacedCredentials(t *testing.T) {
	for _, c := range []struct {
		raw, stops string
		want       bool
	}{
		{"smtp://AKIA:BKpart/rest+x@email-smtp.us-east-1.amazonaws.com:587", "/?#", true},
		{"smtp://user:12345?KEY=1@relay.example", "/?#", true},
		{"smtp://user:pw#rest@relay.example", "/?#", true},
		{"esdb://admin:12345/rest@127.0.0.1:2113?tls=false", "/?#", true},
		{"postgres://postgres:12345/rest@127.0.0.1:5432/mailroom", "/", true},
		// Well-formed: credentials before the host, or none.
		{"smtp://user:BKpart%2Frest@relay.example:587", "/?#", false},
		{"smtp://user:p@ss@relay.example:587", "/?#", false},
		{"smtp://relay.example:25", "/?#", false},
		{"esdb://admin:changeit@node1:2113,node2:2113?tls=false", "/?#", false},
		{"postgres://postgres@127.0.0.1:5432/mailroom?sslmode=disable", "/", false},
		{"postgres://db.example/mailroom", "/", false},
		{"not a url", "/?#", false},
	} {
		if got := MisplacedCredentials(c.raw, c.stops); got != c.want {
			t.Errorf("MisplacedCredentials(%q, %q) = %v, want %v", c.raw, c.stops, got, c.want)
		}
	}
}
