package config

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// defaults is the configuration with every flag at its default, as serve
// would start without settings.
func defaults(t *testing.T) Config {
	t.Helper()
	var c Config
	c.Flags(pflag.NewFlagSet("test", pflag.ContinueOnError))
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	return c
}

// A duration that makes no sense is refused at start with the setting's
// name, rather than leaving every write answering 503 or every email
// failing at its first transient error.
func TestDurationsThatCannotWorkAreRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
	}{
		{"MAILROOM_CONSISTENCY_TIMEOUT", func(c *Config) { c.ConsistencyTimeout = 0 }},
		{"MAILROOM_CONSISTENCY_TIMEOUT", func(c *Config) { c.ConsistencyTimeout = -1 }},
		{"MAILROOM_SEND_MAX_AGE", func(c *Config) { c.SendMaxAge = 0 }},
		{"MAILROOM_DNS_TIMEOUT", func(c *Config) { c.DNSTimeout = -1 }},
	} {
		cfg := defaults(t)
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
