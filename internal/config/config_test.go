package config

import (
	"bytes"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// A variable that does not parse is reported by name, with the kind of
// value it takes, not the parser's words; a deprecated setting stops
// nothing.
func TestVariablesThatDoNotParseSayWhatTheyTake(t *testing.T) {
	for name, c := range map[string]struct{ value, want string }{
		"MAILROOM_RATE_LIMIT":          {"abc", `rate-limit (MAILROOM_RATE_LIMIT): "abc" is not a number`},
		"MAILROOM_RATE_BURST":          {"1.5", `rate-burst (MAILROOM_RATE_BURST): "1.5" is not a whole number`},
		"MAILROOM_WEBHOOK_ALLOW_HTTP":  {"maybe", `webhook-allow-http (MAILROOM_WEBHOOK_ALLOW_HTTP): "maybe" is not true or false`},
		"MAILROOM_CONSISTENCY_TIMEOUT": {"2", `consistency-timeout (MAILROOM_CONSISTENCY_TIMEOUT): "2" is not a duration such as 500ms, 30s or 5m`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, c.value)
			var cfg Config
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			cfg.Flags(fs)
			cfg.ApplyEnv(fs)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "strconv") {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
	t.Setenv("MAILROOM_SEND_CONCURRENCY", "100")
	var cfg Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.Flags(fs)
	cfg.ApplyEnv(fs)
	if err := cfg.Validate(); err != nil {
		t.Errorf("a deprecated, ignored setting stopped the start: %v", err)
	}
}

// A value that cannot work is refused at start, naming the flag and the
// variable, instead of starting a server that quietly does something else
// (no rate limit, a burst of one, never ready).
func TestValuesThatCannotWorkAreRefusedByName(t *testing.T) {
	for want, set := range map[string]func(*Config){
		"rate-limit (MAILROOM_RATE_LIMIT)":                         func(c *Config) { c.RateLimit = -3 },
		"rate-burst (MAILROOM_RATE_BURST)":                         func(c *Config) { c.RateBurst = 0 },
		"ip-rate-limit (MAILROOM_IP_RATE_LIMIT)":                   func(c *Config) { c.IPRateLimit = math.NaN() }, // which no comparison refuses
		"provider-max-rate (MAILROOM_PROVIDER_MAX_RATE)":           func(c *Config) { c.ProviderMaxRate = math.Inf(1) },
		"account-rate-burst (MAILROOM_ACCOUNT_RATE_BURST)":         func(c *Config) { c.AccountRateBurst = -1 },
		"ready-max-lag (MAILROOM_READY_MAX_LAG)":                   func(c *Config) { c.ReadyMaxLag = -1 },
		"region (MAILROOM_REGION)":                                 func(c *Config) { c.Region = "not a region!" },
		"dkim-rotation-days (MAILROOM_DKIM_ROTATION_DAYS)":         func(c *Config) { c.DKIMRotationDays = 0 },
		"webhook-retry-schedule (MAILROOM_WEBHOOK_RETRY_SCHEDULE)": func(c *Config) { c.WebhookRetries = "1m,soon" },
		"max-sending-bytes (MAILROOM_MAX_SENDING_BYTES)":           func(c *Config) { c.MaxSendingBytes = 200 << 10 },
		"roles (MAILROOM_ROLES)":                                   func(c *Config) { c.Roles = nil }, // --roles ""
		// Beyond what a job queue takes, the worker would stop once serving.
		"webhook-concurrency (MAILROOM_WEBHOOK_CONCURRENCY)":   func(c *Config) { c.WebhookConcurrency = 10001 },
		"provider-concurrency (MAILROOM_PROVIDER_CONCURRENCY)": func(c *Config) { c.ProviderConcurrency = 10001 },
	} {
		cfg := defaults(t)
		set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), want+": ") {
			t.Errorf("%s: %v", want, err)
		}
	}
	cfg := defaults(t)
	cfg.WebhookConcurrency, cfg.ProviderConcurrency = 10000, 10000
	if err := cfg.Validate(); err != nil {
		t.Errorf("the most workers a job queue takes: %v", err)
	}
	// A bound whose quarter holds one small email works; none works too.
	for _, n := range []int64{0, 4 << 20} {
		cfg := defaults(t)
		cfg.MaxSendingBytes = n
		if err := cfg.Validate(); err != nil {
			t.Errorf("max-sending-bytes %d: %v", n, err)
		}
	}
	for _, region := range []string{"us-east-1", "ap-southeast-2", "us-gov-west-1", "eu-central-1"} {
		cfg := defaults(t)
		cfg.Region, cfg.Provider = region, "ses"
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", region, err)
		}
	}
	// An S3-compatible store names its own regions; SES does not take them.
	for _, region := range []string{"auto", "fr-par", "nyc3", "us-west-004"} {
		cfg := defaults(t)
		cfg.Region, cfg.BlobS3Bucket, cfg.BlobS3Endpoint = region, "mail", "https://s3.example.net"
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s with an S3 endpoint: %v", region, err)
		}
		cfg.Provider = "ses"
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "region (MAILROOM_REGION): ") {
			t.Errorf("%s with SES: %v", region, err)
		}
	}
}

// Production refuses the development-only egress settings naming the
// ones given, so that the operator knows which to unset.
func TestProductionNamesTheDevelopmentSettingsItRefuses(t *testing.T) {
	for _, c := range []struct {
		set      func(*Config)
		want     string
		unwanted []string
	}{
		{func(c *Config) { c.WebhookAllowHTTP = true }, "webhook-allow-http (MAILROOM_WEBHOOK_ALLOW_HTTP)=true",
			[]string{"MAILROOM_EGRESS_ALLOW_CIDRS", "MAILROOM_EGRESS_RESOLVER"}},
		{func(c *Config) { c.EgressResolver = "127.0.0.1:5300" }, "egress-resolver (MAILROOM_EGRESS_RESOLVER)=127.0.0.1:5300",
			[]string{"MAILROOM_EGRESS_ALLOW_CIDRS", "MAILROOM_WEBHOOK_ALLOW_HTTP"}},
		{func(c *Config) { c.EgressAllowCIDRs, c.WebhookAllowHTTP = "127.0.0.0/8", true },
			"egress-allow-cidrs (MAILROOM_EGRESS_ALLOW_CIDRS)=127.0.0.0/8, webhook-allow-http (MAILROOM_WEBHOOK_ALLOW_HTTP)=true",
			[]string{"MAILROOM_EGRESS_RESOLVER"}},
	} {
		cfg := defaults(t)
		cfg.Environment, cfg.MasterKey, cfg.Provider, cfg.SMTPURL = "production", strings.Repeat("ab", 32), "smtp", "smtp://relay"
		c.set(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "development only") {
			t.Errorf("%q: %v", c.want, err)
			continue
		}
		for _, u := range c.unwanted {
			if strings.Contains(err.Error(), u) {
				t.Errorf("%q: %v names %s, which is not set", c.want, err, u)
			}
		}
	}
}

// Setting names every flag's own variable.
func TestSettingNamesEachFlagsVariable(t *testing.T) {
	var c Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c.Flags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if want := f.Name + " (" + f.Annotations[envAnnotation][0] + ")"; Setting(f.Name) != want {
			t.Errorf("Setting(%q) = %q, want %q", f.Name, Setting(f.Name), want)
		}
	})
}

// A master key given in the environment that cannot be one is refused by
// the variable's name.
func TestBadMasterKeyIsNamed(t *testing.T) {
	cfg := defaults(t)
	cfg.MasterKey = "abcd"
	if _, _, err := cfg.LoadMasterKey(); err == nil || !strings.Contains(err.Error(), "MAILROOM_MASTER_KEY") {
		t.Fatalf("bad master key: %v", err)
	}
}

// Whole numbers are read in base 10 only, whether from a variable or a
// flag: a leading zero does not make "045" days an octal 37, nor "0x10"
// a hexadecimal 16.
func TestWholeNumbersAreDecimal(t *testing.T) {
	t.Setenv("MAILROOM_RETENTION_DAYS", "045")
	t.Setenv("MAILROOM_MAX_INFLIGHT_BYTES", "0100000000")
	var cfg Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.Flags(fs)
	if err := fs.Parse([]string{"--rate-burst", "010"}); err != nil {
		t.Fatal(err)
	}
	cfg.ApplyEnv(fs)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.RetentionDays != 45 || cfg.MaxInflightBytes != 100000000 || cfg.RateBurst != 10 {
		t.Errorf("retention days %d, max inflight bytes %d, rate burst %d; want 45, 100000000, 10",
			cfg.RetentionDays, cfg.MaxInflightBytes, cfg.RateBurst)
	}
	t.Setenv("MAILROOM_RETENTION_DAYS", "0x10")
	cfg.ApplyEnv(fs)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `retention-days (MAILROOM_RETENTION_DAYS): "0x10" is not a whole number`) {
		t.Errorf("0x10 days: %v", err)
	}
}

// Resolvers and address ranges are checked with the other settings, before
// anything connects, and the error names the flag and its variable.
func TestResolversAndAddressRangesAreRefusedByName(t *testing.T) {
	for want, set := range map[string]func(*Config){
		"dns-resolvers (MAILROOM_DNS_RESOLVERS)":           func(c *Config) { c.DNSResolvers = "bogus" },
		"trusted-proxies (MAILROOM_TRUSTED_PROXIES)":       func(c *Config) { c.TrustedProxies = "10.0.0.0/33" },
		"egress-allow-cidrs (MAILROOM_EGRESS_ALLOW_CIDRS)": func(c *Config) { c.EgressAllowCIDRs = "127.0.0.0/8,nowhere" },
		// Dialled as it is for every webhook's and attachment's host name.
		"egress-resolver (MAILROOM_EGRESS_RESOLVER)": func(c *Config) { c.EgressResolver = "bogus" },
	} {
		cfg := defaults(t)
		set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), want+": ") {
			t.Errorf("%s: %v", want, err)
		}
	}
	cfg := defaults(t)
	cfg.EgressResolver = "127.0.0.1"
	if addr, err := cfg.EgressResolverAddr(); err != nil || addr != "127.0.0.1:53" {
		t.Errorf("egress resolver 127.0.0.1: %q %v, want 127.0.0.1:53", addr, err)
	}
}

// The AWS endpoints and the SES feedback queue are URLs the clients take
// as they are, failing only at their first request: one that cannot work
// is refused at start, by name, and one with credentials is not quoted.
func TestAWSURLsAreRefusedByName(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{"notaurl", `"notaurl" is not an http:// or https:// URL`},
		{"minio:9000", `"minio:9000" is not an http:// or https:// URL`},
		{"::bad", `"::bad" is not an http:// or https:// URL`},
		{"https://", `"https://" is not an http:// or https:// URL`},
		{"ftp://s3.example.net", `"ftp://s3.example.net" is not an http:// or https:// URL`},
		{"http://minio:secret-4471@minio:9000", "holds credentials"},
	} {
		for _, s := range []struct {
			flag string
			set  func(*Config, string)
		}{
			{"ses-endpoint", func(c *Config, v string) { c.SESEndpoint = v }},
			{"ses-events-queue-url", func(c *Config, v string) { c.SESEventsQueueURL = v }},
			{"blob-s3-endpoint", func(c *Config, v string) { c.BlobS3Endpoint = v }},
		} {
			cfg := defaults(t)
			s.set(&cfg, c.value)
			err := cfg.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), Setting(s.flag)+": ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %q: %v, want %q", s.flag, c.value, err, c.want)
			} else if strings.Contains(err.Error(), "secret-4471") {
				t.Errorf("%s: the error shows the password: %v", s.flag, err)
			}
		}
	}
	for _, s := range []func(*Config){
		func(c *Config) { c.SESEndpoint = "http://127.0.0.1:4566" },
		func(c *Config) {
			c.SESEventsQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/mailroom-ses-events"
		},
		func(c *Config) { c.BlobS3Endpoint = "http://[::1]:9000/" },
	} {
		cfg := defaults(t)
		s(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// A MAILROOM_* variable that names no setting is listed, so that a
// misspelt one is reported instead of quietly doing nothing; the
// variables of the tests, benchmarks and example receiver are not.
func TestVariablesThatNameNoSettingAreListed(t *testing.T) {
	t.Setenv("MAILROOM_RATE_LIMT", "5")
	t.Setenv("MAILROOM_RATE_LIMIT", "5")
	t.Setenv("MAILROOM_TEST_DATABASE_URL", "postgres://x")
	t.Setenv("MAILROOM_WEBHOOK_SECRET", "whsec_x")
	t.Setenv("MAILROOM_DATABSE_URL", "postgres://db.example/mailroom")
	t.Setenv("MAILROOM_QUITE_UNLIKE_ANY", "1")
	var cfg Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.Flags(fs)
	cfg.ApplyEnv(fs)
	want := []string{"MAILROOM_DATABSE_URL", "MAILROOM_QUITE_UNLIKE_ANY", "MAILROOM_RATE_LIMT"}
	if got := cfg.UnknownVariables(); !slices.Equal(got, want) {
		t.Fatalf("unknown variables %v, want %v", got, want)
	}
	// A misspelling is matched to the setting it most likely meant.
	for name, meant := range map[string]string{"MAILROOM_RATE_LIMT": "MAILROOM_RATE_LIMIT",
		"MAILROOM_DATABSE_URL": "MAILROOM_DATABASE_URL", "MAILROOM_QUITE_UNLIKE_ANY": ""} {
		if got := cfg.Meant(name); got != meant {
			t.Errorf("%s is taken for %q, want %q", name, got, meant)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("an unknown variable stopped the start: %v", err)
	}
}

// Processes that start at once without a development key all end with the
// same one: none overwrites the file another wrote and sealed under.
func TestDevelopmentKeyIsGeneratedOnce(t *testing.T) {
	for range 20 {
		cfg := defaults(t)
		cfg.DataDir = t.TempDir()
		const n = 8
		keys := make([][]byte, n)
		generated := make([]bool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { keys[i], generated[i], errs[i] = cfg.LoadMasterKey() })
		}
		wg.Wait()
		made := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if !bytes.Equal(keys[i], keys[0]) {
				t.Fatalf("processes started at once got different keys")
			}
			if generated[i] {
				made++
			}
		}
		if made != 1 {
			t.Fatalf("%d processes say they made the key, want 1", made)
		}
		onDisk, _, err := cfg.LoadMasterKey()
		if err != nil || !bytes.Equal(onDisk, keys[0]) {
			t.Fatalf("the file holds another key (%v)", err)
		}
		if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 1 {
			t.Fatalf("the data dir holds %v, want master.key alone", entries)
		}
	}
}

// Settings that suit development only are named at start when a serving
// process has them, so that one left in a real deployment shows in its
// logs; the default development setup has none to name.
func TestCautionsNameDevelopmentSettings(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want []string // one per caution, each in its line
	}{
		{"development defaults", func(*Config) {}, nil},
		{"production with a provider", func(c *Config) { c.Environment, c.Provider = "production", "ses" }, nil},
		{"egress exceptions", func(c *Config) {
			c.EgressAllowCIDRs, c.EgressResolver, c.WebhookAllowHTTP = "127.0.0.0/8", "127.0.0.1:5300", true
		}, []string{"MAILROOM_EGRESS_ALLOW_CIDRS)=127.0.0.0/8, egress-resolver (MAILROOM_EGRESS_RESOLVER)=127.0.0.1:5300, webhook-allow-http (MAILROOM_WEBHOOK_ALLOW_HTTP)=true"}},
		{"plain http only", func(c *Config) { c.WebhookAllowHTTP = true }, []string{"(MAILROOM_WEBHOOK_ALLOW_HTTP)=true"}},
		{"bootstrap in development", func(c *Config) { c.Bootstrap = true }, nil},
		{"sandbox in production", func(c *Config) { c.Environment = "production" }, []string{"sandbox provider sends nothing"}},
		{"bootstrap in production", func(c *Config) {
			c.Environment, c.Provider, c.Bootstrap, c.SMTPURL = "production", "smtp", true, "smtp://relay"
		},
			[]string{"(MAILROOM_BOOTSTRAP) prints"}},
		// Settings the provider or blob storage chosen never read.
		{"a relay without the smtp provider", func(c *Config) { c.SMTPURL = "smtp://relay.example:587" },
			[]string{"without effect: smtp-url (MAILROOM_SMTP_URL) with provider sandbox"}},
		{"SES settings with another provider", func(c *Config) {
			c.Provider, c.SMTPURL, c.SESConfigSet, c.SESEventsQueueURL = "smtp", "smtp://relay", "mailroom", "https://sqs.example/1/q"
		}, []string{"(MAILROOM_SES_CONFIGURATION_SET) with provider smtp; ses-events-queue-url (MAILROOM_SES_EVENTS_QUEUE_URL) with provider smtp"}},
		{"SES settings with SES", func(c *Config) {
			c.Provider, c.SESConfigSet, c.SESEventsQueueURL, c.SESEndpoint = "ses", "mailroom", "https://sqs.example/1/q", "http://127.0.0.1:4566"
		}, nil},
		{"sandbox latency with SES", func(c *Config) { c.Provider, c.SandboxLatency = "ses", 50*time.Millisecond },
			[]string{"(MAILROOM_SANDBOX_LATENCY) with provider ses"}},
		{"S3 settings without a bucket", func(c *Config) { c.BlobS3Prefix, c.BlobS3Endpoint = "prod/", "http://minio:9000" },
			[]string{"(MAILROOM_BLOB_S3_PREFIX) without blob-s3-bucket (MAILROOM_BLOB_S3_BUCKET); blob-s3-endpoint"}},
		{"S3 settings with a bucket", func(c *Config) {
			c.BlobS3Bucket, c.BlobS3Prefix, c.BlobS3Endpoint = "mail", "prod/", "http://minio:9000"
		}, nil},
		// Address ranges wider than they seem.
		{"a proxy range with host bits", func(c *Config) { c.TrustedProxies = "10.0.0.0/8, 192.168.1.7/16" },
			[]string{"trusted-proxies (MAILROOM_TRUSTED_PROXIES): 192.168.1.7/16 is read as 192.168.0.0/16, the whole network (write 192.168.1.7/32 for one address)"}},
		{"every address a proxy", func(c *Config) { c.Environment, c.Provider, c.TrustedProxies = "production", "ses", "::/0" },
			[]string{"(MAILROOM_TRUSTED_PROXIES): ::/0 trusts every address"}},
		{"unused in production", func(c *Config) { c.Environment, c.SMTPURL = "production", "smtp://relay" },
			[]string{"(MAILROOM_SMTP_URL) with provider sandbox", "sandbox provider sends nothing"}},
	} {
		cfg := defaults(t)
		c.set(&cfg)
		got := cfg.Cautions()
		if len(got) != len(c.want) {
			t.Errorf("%s: %q, want %d caution(s)", c.name, got, len(c.want))
			continue
		}
		for i, want := range c.want {
			if !strings.Contains(got[i], want) {
				t.Errorf("%s: %q, want it to say %q", c.name, got[i], want)
			}
		}
	}
}
