package app_test

import (
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
)

// A customer who points a name of their own at an internal name after
// creating the endpoint learns from the delivery's error no more than at
// create: a name that exists inside and one that does not read alike.
func TestDeliveryErrorsDoNotMapInternalNames(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(dnscheck.Record{Type: "A", Name: "probe.hooks.test", Value: "93.184.216.34"},
		dnscheck.Record{Type: "A", Name: "db.corp.internal", Value: "10.96.0.7"})
	s := apptest.Start(t, func(c *config.Config) { c.EgressResolver = dns.Addr(); c.WebhookRetries = "1h" })
	_, _, key := s.Sender("acme.test")
	r := s.Do("POST", "/v1/webhooks", key, map[string]any{"url": "https://probe.hooks.test:1/hook"})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	dns.Remove("probe.hooks.test", "A")
	probe := func(target string) string {
		dns.Set(dnscheck.Record{Type: "CNAME", Name: "probe.hooks.test", Value: target})
		did := s.Do("POST", "/v1/webhooks/"+id+"/test", key, nil).JSON(t)["delivery_id"].(string)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for _, d := range s.Do("GET", "/v1/webhooks/"+id+"/deliveries", key, nil).JSON(t)["data"].([]any) {
				d := d.(map[string]any)
				if d["id"] == did && d["attempts"] == 1.0 {
					return d["error"].(string)
				}
			}
		}
		t.Fatal("no attempt")
		return ""
	}
	exists, missing := probe("db.corp.internal"), probe("nothere.corp.internal")
	if exists != missing || exists != "host does not resolve to a public address" {
		t.Errorf("delivery errors tell an existing internal name (%q) from a missing one (%q)", exists, missing)
	}
}
