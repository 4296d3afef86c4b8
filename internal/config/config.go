// Package config holds Mailroom's settings. Every setting is a flag and a
// MAILROOM_* environment variable, so `mailroom serve --help` lists them all
// together with their variables. Flag defaults are the built-in ones; the
// environment is applied after parsing (ApplyEnv), so help output never
// shows a value taken from the environment, such as the master key.
package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"github.com/spf13/pflag"

	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/egress"
)

// Config is the whole configuration.
type Config struct {
	DatabaseURL string
	EventStore  string
	HTTPAddr    string
	OpsAddr     string
	MasterKey   string
	// MasterKeyPrevious lists keys that open what was sealed before the
	// master key changed; nothing is sealed under them.
	MasterKeyPrevious  string
	DataDir            string
	Environment        string
	Provider           string
	SandboxOutbox      string
	SandboxLatency     time.Duration
	Region             string
	LogFormat          string
	LogLevel           string
	RateLimit          float64
	RateBurst          int
	IPRateLimit        float64
	IPRateBurst        int
	AccountRateLimit   float64
	AccountRateBurst   int
	TrustedProxies     string
	HTTPReadTimeout    time.Duration
	HTTPWriteTimeout   time.Duration
	HTTPIdleTimeout    time.Duration
	ShutdownDelay      time.Duration
	ShutdownTimeout    time.Duration
	ConsistencyTimeout time.Duration
	MaxInflightBytes   int64
	ReadyMaxLag        int64
	Roles              []string
	Bootstrap          bool
	DNSResolvers       string
	DNSTimeout         time.Duration
	DomainPollInterval time.Duration
	RetentionDays      int
	RetentionInterval  time.Duration
	DKIMRotationDays   int
	BlobDir            string
	BlobS3Bucket       string
	BlobS3Prefix       string
	BlobS3Endpoint     string
	ClamdAddr          string
	EgressAllowCIDRs   string
	WebhookAllowHTTP   bool
	SendMaxAge         time.Duration
	SendConcurrency    int
	// ProviderConcurrency is the most messages in flight to the provider
	// per worker process; ProviderMaxRate the most recipients a second
	// for all worker processes together, as SES counts its rate (0: the
	// provider's own limit).
	ProviderConcurrency int
	ProviderMaxRate     float64
	// AccountConcurrency is the most emails of one account being prepared
	// or sent at once per worker process.
	AccountConcurrency int
	// MaxSendingBytes bounds the attachment bytes of the emails a worker
	// process prepares and sends at once.
	MaxSendingBytes int64
	WebhookRetries  string
	// WebhookConcurrency bounds webhook attempts in flight per worker
	// process; WebhookAccountConcurrency bounds one account's.
	WebhookConcurrency        int
	WebhookAccountConcurrency int
	// WebhookTimeout is how long an attempt waits for the receiver's
	// answer; zero is the 10 s receivers are promised, and an attempt's
	// job ends after a minute whatever it is. No flag sets it: tests that
	// hold receivers lengthen it, so that what they check does not race
	// the time-out on a slow machine.
	WebhookTimeout    time.Duration
	EgressResolver    string
	SMTPURL           string
	SESConfigSet      string
	SESEventsQueueURL string
	SESEndpoint       string

	envErrors  []error           // MAILROOM_* values that did not parse
	unknownEnv []string          // MAILROOM_* variables that name no setting
	meant      map[string]string // an unknown variable's nearest setting variable
}

// Flags registers the settings on fs with their built-in defaults; call
// ApplyEnv after parsing to take the MAILROOM_* variables into account.
func (c *Config) Flags(fs *pflag.FlagSet) {
	str(fs, &c.DatabaseURL, "database-url", "MAILROOM_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mailroom?sslmode=disable", "PostgreSQL for read models (and events, with the postgres event store); created if missing"+secretNote)
	str(fs, &c.MasterKeyPrevious, "master-key-previous", "MAILROOM_MASTER_KEY_PREVIOUS", "", "earlier master keys (64 hex characters each, comma-separated) that still open what was sealed under them while the master key is being replaced; nothing new is sealed under them"+secretNote)
	str(fs, &c.EventStore, "eventstore", "MAILROOM_EVENTSTORE", "postgres", `event store: "postgres" (same database) or an esdb:// connection string`+secretNote)
	str(fs, &c.HTTPAddr, "http-addr", "MAILROOM_HTTP_ADDR", "127.0.0.1:8080", "address the HTTP API listens on")
	str(fs, &c.OpsAddr, "ops-addr", "MAILROOM_OPS_ADDR", "", "operator listener for /metrics and the detail of /readyz (which the HTTP address then no longer serves); empty: all on the HTTP address")
	str(fs, &c.MasterKey, "master-key", "MAILROOM_MASTER_KEY", "", "32-byte key as 64 hex characters that encrypts stored secrets; generated into <data-dir>/master.key in development"+secretNote)
	str(fs, &c.DataDir, "data-dir", "MAILROOM_DATA_DIR", "./.mailroom", "where development keeps its generated master key (the outbox and blobs have their own settings)")
	str(fs, &c.Environment, "env", "MAILROOM_ENV", "development", `"development" or "production" (production requires an explicit master key)`)
	str(fs, &c.Provider, "provider", "MAILROOM_PROVIDER", "sandbox", "mail provider: sandbox, ses or smtp")
	str(fs, &c.SandboxOutbox, "sandbox-outbox", "MAILROOM_SANDBOX_OUTBOX", "./.mailroom/outbox", "where the sandbox provider writes <email_id>.eml")
	c.duration(fs, &c.SandboxLatency, "sandbox-latency", "MAILROOM_SANDBOX_LATENCY", 0, "time the sandbox provider takes to accept each message, as a provider's API round trip does (e.g. 50ms), to measure throughput without a real provider")
	str(fs, &c.Region, "region", "MAILROOM_REGION", "us-east-1", "provider region of sending identities")
	str(fs, &c.LogFormat, "log-format", "MAILROOM_LOG_FORMAT", "text", `log format: "text" or "json"`)
	str(fs, &c.LogLevel, "log-level", "MAILROOM_LOG_LEVEL", "info", "debug, info, warn or error")
	c.float(fs, &c.RateLimit, "rate-limit", "MAILROOM_RATE_LIMIT", 50, "requests per second allowed per API key or token (0 disables)")
	c.integer(fs, &c.RateBurst, "rate-burst", "MAILROOM_RATE_BURST", 100, "requests a credential may send in a burst")
	c.float(fs, &c.IPRateLimit, "ip-rate-limit", "MAILROOM_IP_RATE_LIMIT", 200, "requests per second allowed per client IP address (IPv6: per /64), counted before authentication (0 disables)")
	c.integer(fs, &c.IPRateBurst, "ip-rate-burst", "MAILROOM_IP_RATE_BURST", 400, "requests a client IP address may send in a burst")
	c.float(fs, &c.AccountRateLimit, "account-rate-limit", "MAILROOM_ACCOUNT_RATE_LIMIT", 100, "requests per second allowed per account, all its API keys and tokens together (0 disables)")
	c.integer(fs, &c.AccountRateBurst, "account-rate-burst", "MAILROOM_ACCOUNT_RATE_BURST", 200, "requests an account may send in a burst")
	str(fs, &c.TrustedProxies, "trusted-proxies", "MAILROOM_TRUSTED_PROXIES", "", "proxies (CIDRs, comma-separated) whose X-Forwarded-For names the client IP address; empty: the connection's address is the client's")
	c.duration(fs, &c.HTTPReadTimeout, "http-read-timeout", "MAILROOM_HTTP_READ_TIMEOUT", 2*time.Minute, "time allowed to read a whole request, body included (0: none)")
	c.duration(fs, &c.HTTPWriteTimeout, "http-write-timeout", "MAILROOM_HTTP_WRITE_TIMEOUT", 3*time.Minute, "time allowed from the end of a request's headers to the end of its response; keep it above http-read-timeout (0: none)")
	c.duration(fs, &c.HTTPIdleTimeout, "http-idle-timeout", "MAILROOM_HTTP_IDLE_TIMEOUT", time.Minute, "how long an idle keep-alive connection is kept open (0: none)")
	c.duration(fs, &c.ShutdownDelay, "shutdown-delay", "MAILROOM_SHUTDOWN_DELAY", 0, "on a stop signal, how long an API process keeps serving while /readyz answers 503, so that load balancers stop sending to it before it closes its listener (e.g. 5s behind a Kubernetes Service)")
	c.duration(fs, &c.ShutdownTimeout, "shutdown-timeout", "MAILROOM_SHUTDOWN_TIMEOUT", 15*time.Second, "on a stop signal, how long requests in flight have to finish before they are cut off")
	c.duration(fs, &c.ConsistencyTimeout, "consistency-timeout", "MAILROOM_CONSISTENCY_TIMEOUT", 2*time.Second, "how long a write waits for the read models to show it")
	c.int64Flag(fs, &c.MaxInflightBytes, "max-inflight-bytes", "MAILROOM_MAX_INFLIGHT_BYTES", 192<<20, "request body bytes one API process accepts at once (by Content-Length, or a MiB at a time as a chunked body arrives), each held about 2.5 times over while it is decoded and stored; beyond it 503 with Retry-After; 0 disables")
	c.int64Flag(fs, &c.ReadyMaxLag, "ready-max-lag", "MAILROOM_READY_MAX_LAG", 10000, "events a projection may lag before /readyz fails")
	list(fs, &c.Roles, "roles", "MAILROOM_ROLES", []string{"api", "projections", "workers"}, "roles this process runs: api, projections, workers")
	str(fs, &c.DNSResolvers, "dns-resolvers", "MAILROOM_DNS_RESOLVERS", "1.1.1.1:53,8.8.8.8:53", "resolvers (host:port, comma-separated) that domain verification queries directly; every one must see the records")
	c.duration(fs, &c.DNSTimeout, "dns-timeout", "MAILROOM_DNS_TIMEOUT", 5*time.Second, "time allowed for one DNS query")
	c.duration(fs, &c.DomainPollInterval, "domain-poll-interval", "MAILROOM_DOMAIN_POLL_INTERVAL", 5*time.Minute, "how often pending domains and DKIM key changes are re-checked")
	c.integer(fs, &c.RetentionDays, "retention-days", "MAILROOM_RETENTION_DAYS", 45, "days an email's content and personal data are kept, unless its account sets its own (1 to 365); then they are erased and only daily counts and suppressions remain")
	c.duration(fs, &c.RetentionInterval, "retention-interval", "MAILROOM_RETENTION_INTERVAL", time.Hour, "how often emails past retention are looked for and erased")
	c.integer(fs, &c.DKIMRotationDays, "dkim-rotation-days", "MAILROOM_DKIM_ROTATION_DAYS", 180, "age in days after which a domain's DKIM key is due for rotation")
	str(fs, &c.BlobDir, "blob-dir", "MAILROOM_BLOB_DIR", "./.mailroom/blobs", "where email bodies and attachments are stored (filesystem blob storage)")
	str(fs, &c.BlobS3Bucket, "blob-s3-bucket", "MAILROOM_BLOB_S3_BUCKET", "", "store email bodies and attachments in this S3 bucket instead of blob-dir")
	str(fs, &c.BlobS3Prefix, "blob-s3-prefix", "MAILROOM_BLOB_S3_PREFIX", "", "key prefix inside the S3 bucket")
	str(fs, &c.BlobS3Endpoint, "blob-s3-endpoint", "MAILROOM_BLOB_S3_ENDPOINT", "", "S3 endpoint override (MinIO, emulators); path-style addressing is used with it")
	str(fs, &c.ClamdAddr, "clamd-addr", "MAILROOM_CLAMD_ADDR", "", "ClamAV daemon (host:port or unix:/path) that scans every email; empty: built-in checks only")
	str(fs, &c.EgressAllowCIDRs, "egress-allow-cidrs", "MAILROOM_EGRESS_ALLOW_CIDRS", "", "development only: address ranges webhooks and attachment downloads may reach although not public, e.g. 127.0.0.0/8,::1/128")
	str(fs, &c.SMTPURL, "smtp-url", "MAILROOM_SMTP_URL", "", "relay of the smtp provider: smtp://user:pass@host:587 (STARTTLS when the relay offers it; add ?starttls=require to refuse a relay without it; credentials are only ever sent over TLS) or smtps://user:pass@host:465 (implicit TLS)"+secretNote)
	str(fs, &c.SESConfigSet, "ses-configuration-set", "MAILROOM_SES_CONFIGURATION_SET", "", "SES configuration set whose event publishing feeds MAILROOM_SES_EVENTS_QUEUE_URL")
	str(fs, &c.SESEventsQueueURL, "ses-events-queue-url", "MAILROOM_SES_EVENTS_QUEUE_URL", "", "SQS queue (fed by SNS from SES event publishing) that Mailroom long-polls for delivery feedback")
	str(fs, &c.SESEndpoint, "ses-endpoint", "MAILROOM_SES_ENDPOINT", "", "endpoint override for SES, SQS and STS (emulators)")
	str(fs, &c.EgressResolver, "egress-resolver", "MAILROOM_EGRESS_RESOLVER", "", "development only: DNS server (host:port) that webhook and attachment host names are resolved with instead of the system's")
	c.boolean(fs, &c.WebhookAllowHTTP, "webhook-allow-http", "MAILROOM_WEBHOOK_ALLOW_HTTP", false, "development only: allow plain http webhook and attachment URLs")
	c.duration(fs, &c.SendMaxAge, "send-max-age", "MAILROOM_SEND_MAX_AGE", 24*time.Hour, "how long transient provider failures and throttling are retried before an email fails with provider_unavailable (other transient failures: internal_error)")
	c.integer(fs, &c.SendConcurrency, "send-concurrency", "MAILROOM_SEND_CONCURRENCY", 8, "deprecated and ignored: sending and webhooks run on the job queue (see provider-concurrency and webhook-concurrency)")
	c.integer(fs, &c.ProviderConcurrency, "provider-concurrency", "MAILROOM_PROVIDER_CONCURRENCY", 128, "messages in flight to the provider per worker process (emails being prepared or sent), 1 to 10000")
	c.float(fs, &c.ProviderMaxRate, "provider-max-rate", "MAILROOM_PROVIDER_MAX_RATE", 0, "recipients per second sent to by all worker processes together (an email to ten recipients counts ten, as SES counts); 0: the provider's own (SES: the account's maximum send rate; sandbox and smtp: unlimited)")
	c.integer(fs, &c.AccountConcurrency, "account-concurrency", "MAILROOM_ACCOUNT_CONCURRENCY", 96, "emails of one account being prepared or sent at once per worker process, so one account cannot take every slot (0: no cap); at or above provider-concurrency it caps nothing")
	c.int64Flag(fs, &c.MaxSendingBytes, "max-sending-bytes", "MAILROOM_MAX_SENDING_BYTES", 64<<20, "attachment bytes of the emails one worker process prepares and sends at once, each held about six times over (each email counts its attachments, a download still to come at its most; a quarter of it is kept for emails with under 1 MiB of attachments, which never wait behind larger ones); at least 4 MiB, or 0 to disable")
	str(fs, &c.WebhookRetries, "webhook-retry-schedule", "MAILROOM_WEBHOOK_RETRY_SCHEDULE", "30s,2m,10m,30m,1h30m,3h", "waits before each webhook retry (comma-separated Go durations)")
	c.integer(fs, &c.WebhookConcurrency, "webhook-concurrency", "MAILROOM_WEBHOOK_CONCURRENCY", 128, "webhook attempts in flight per worker process, 1 to 10000")
	c.integer(fs, &c.WebhookAccountConcurrency, "webhook-account-concurrency", "MAILROOM_WEBHOOK_ACCOUNT_CONCURRENCY", 16, "webhook attempts of one account in flight per worker process, so one account's slow endpoints cannot hold the others' up")
	c.boolean(fs, &c.Bootstrap, "bootstrap", "MAILROOM_BOOTSTRAP", false, "on first start, create an account, admin token and API key and print them")
}

// Has reports whether the process runs role.
func (c *Config) Has(role string) bool {
	for _, r := range c.Roles {
		if strings.TrimSpace(r) == role {
			return true
		}
	}
	return false
}

// Setting names a setting as an error shows it: its flag and its
// variable, "rate-limit (MAILROOM_RATE_LIMIT)", so whichever way it was
// given can be found.
func Setting(flag string) string {
	return fmt.Sprintf("%s (MAILROOM_%s)", flag, strings.ToUpper(strings.ReplaceAll(flag, "-", "_")))
}

// setting is a setting's value, named by its flag, for Validate's checks.
type setting[T any] struct {
	flag  string
	value T
}

// invalid is the error of a setting whose value cannot work.
func invalid(flag, format string, args ...any) error {
	return fmt.Errorf("%s: %s", Setting(flag), fmt.Sprintf(format, args...))
}

// awsRegion is the shape of an AWS region name (us-east-1, ap-southeast-2,
// us-gov-west-1), which SES and S3 without an endpoint of its own need;
// any region is a DNS label, as it ends up in a domain's MX record (and an
// S3-compatible store may name its own: auto, fr-par, nyc3).
var (
	awsRegion = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$`)
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// Validate checks settings that flags cannot.
func (c *Config) Validate() error {
	if len(c.envErrors) > 0 {
		return errors.Join(c.envErrors...)
	}
	for _, r := range c.Roles {
		switch strings.TrimSpace(r) {
		case "api", "projections", "workers":
		default:
			return invalid("roles", "unknown role %q (want api, projections, workers)", r)
		}
	}
	if len(c.Roles) == 0 {
		// A process of no role would serve nothing yet answer ready, as
		// `--roles "$ROLES"` with the variable unset gives.
		return invalid("roles", "at least one role is needed (api, projections, workers)")
	}
	// In a fixed order, so that of several wrong settings the same one is
	// named every time.
	for _, s := range []setting[float64]{{"rate-limit", c.RateLimit}, {"ip-rate-limit", c.IPRateLimit},
		{"account-rate-limit", c.AccountRateLimit}, {"provider-max-rate", c.ProviderMaxRate}} {
		if s.value < 0 || math.IsNaN(s.value) || math.IsInf(s.value, 0) {
			return invalid(s.flag, "must be a number, not negative (0: no limit)")
		}
	}
	for _, s := range []setting[int]{{"rate-burst", c.RateBurst}, {"ip-rate-burst", c.IPRateBurst},
		{"account-rate-burst", c.AccountRateBurst}, {"dkim-rotation-days", c.DKIMRotationDays},
		{"webhook-account-concurrency", c.WebhookAccountConcurrency}} {
		if s.value <= 0 {
			return invalid(s.flag, "must be positive")
		}
	}
	for _, s := range []setting[time.Duration]{{"domain-poll-interval", c.DomainPollInterval},
		{"retention-interval", c.RetentionInterval}, {"shutdown-timeout", c.ShutdownTimeout},
		// A write that may not wait for its read models answers 503
		// every time; an email that may not wait fails at the first
		// outage.
		{"consistency-timeout", c.ConsistencyTimeout}, {"send-max-age", c.SendMaxAge}, {"dns-timeout", c.DNSTimeout}} {
		if s.value <= 0 {
			return invalid(s.flag, "must be positive")
		}
	}
	for _, s := range []setting[time.Duration]{{"sandbox-latency", c.SandboxLatency}, {"shutdown-delay", c.ShutdownDelay},
		{"http-read-timeout", c.HTTPReadTimeout}, {"http-write-timeout", c.HTTPWriteTimeout}, {"http-idle-timeout", c.HTTPIdleTimeout}} {
		if s.value < 0 {
			return invalid(s.flag, "must not be negative")
		}
	}
	for _, s := range []setting[int64]{{"account-concurrency", int64(c.AccountConcurrency)}, {"max-sending-bytes", c.MaxSendingBytes},
		{"ready-max-lag", c.ReadyMaxLag}} {
		if s.value < 0 {
			return invalid(s.flag, "must not be negative")
		}
	}
	// Each is a job queue's workers, which the queue bounds: beyond, a
	// worker would stop only once it was serving.
	for _, s := range []setting[int]{{"provider-concurrency", c.ProviderConcurrency}, {"webhook-concurrency", c.WebhookConcurrency}} {
		if s.value <= 0 || s.value > maxQueueWorkers {
			return invalid(s.flag, "must be between 1 and %d", maxQueueWorkers)
		}
	}
	if dev := c.devEgress(); c.Environment == "production" && len(dev) > 0 {
		which := "them"
		if len(dev) == 1 {
			which = "it"
		}
		return fmt.Errorf("%s: for development only, refused in production; unset %s", strings.Join(dev, ", "), which)
	}
	if c.MaxInflightBytes != 0 && c.MaxInflightBytes < maxBodyBytes {
		return invalid("max-inflight-bytes", "must be 0 (no cap) or at least 47185920 (45 MiB, the largest request body)")
	}
	if c.MaxSendingBytes != 0 && c.MaxSendingBytes < minSendingBytes {
		return invalid("max-sending-bytes", "must be 0 (no bound) or at least 4194304 (4 MiB: a quarter of it holds one email with under 1 MiB of attachments)")
	}
	if c.RetentionDays < 1 || c.RetentionDays > 365 {
		return invalid("retention-days", "must be between 1 and 365")
	}
	if _, err := c.RetrySchedule(); err != nil {
		return err
	}
	if c.HTTPWriteTimeout > 0 && c.HTTPWriteTimeout < c.HTTPReadTimeout {
		// The write deadline runs from the end of the headers, so it also
		// covers reading the body: below the read timeout it would cut
		// slow uploads short with no answer.
		return invalid("http-write-timeout", "must not be below %s", Setting("http-read-timeout"))
	}
	if aws := c.Provider == "ses" || (c.BlobS3Bucket != "" && c.BlobS3Endpoint == ""); aws && !awsRegion.MatchString(c.Region) {
		return invalid("region", "%q is not an AWS region name such as us-east-1", c.Region)
	} else if !dnsLabel.MatchString(c.Region) {
		return invalid("region", "%q is not a region name such as us-east-1 (lower-case letters, digits and hyphens)", c.Region)
	}
	switch c.Environment {
	case "development", "production":
	default:
		return invalid("env", "%q is neither development nor production", c.Environment)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return invalid("log-level", "%q is not debug, info, warn or error", c.LogLevel)
	}
	if !strings.EqualFold(c.LogFormat, "text") && !strings.EqualFold(c.LogFormat, "json") {
		return invalid("log-format", "%q is neither text nor json", c.LogFormat)
	}
	if c.ClamdAddr != "" && !clamdAddrValid(c.ClamdAddr) {
		return invalid("clamd-addr", "%q is neither host:port nor unix:/path", c.ClamdAddr)
	}
	if err := c.validateBackends(); err != nil {
		return err
	}
	return c.validateAddresses()
}

// validateBackends checks the master keys and which event store and
// provider are named. The connection strings themselves are read by their
// adapters (app.Check), before anything connects too.
func (c *Config) validateBackends() error {
	if c.MasterKey != "" {
		if _, err := decodeKey(c.MasterKey); err != nil {
			return invalid("master-key", "%v", err)
		}
	} else if c.Environment == "production" {
		return invalid("master-key", "required in production (64 hex characters)")
	}
	if _, err := c.LoadPreviousKeys(); err != nil {
		return err
	}
	switch c.Provider {
	case "sandbox", "ses":
	case "smtp":
		if c.SMTPURL == "" {
			return invalid("smtp-url", "required with the smtp provider: smtp://user:pass@host:587 (STARTTLS) or smtps://user:pass@host:465 (implicit TLS)")
		}
	default:
		return invalid("provider", "%q is not one of sandbox, ses, smtp", c.Provider)
	}
	if c.EventStore != "" && c.EventStore != "postgres" && !c.EventStoreDB() {
		// Name only the scheme: the value may carry credentials.
		if scheme, _, ok := strings.Cut(c.EventStore, "://"); ok {
			return invalid("eventstore", "scheme %q is neither postgres nor esdb:// (or kurrentdb://)", scheme)
		}
		return invalid("eventstore", `neither "postgres" nor an esdb:// (or kurrentdb://) connection string`)
	}
	return nil
}

// EventStoreDB reports whether eventstore names an EventStoreDB or
// KurrentDB connection string rather than the PostgreSQL store.
func (c *Config) EventStoreDB() bool {
	for _, scheme := range []string{"esdb://", "esdb+discover://", "kurrentdb://", "kurrentdb+discover://"} {
		if strings.HasPrefix(c.EventStore, scheme) {
			return true
		}
	}
	return false
}

// validateAddresses checks the settings that list resolvers and address
// ranges, before anything connects: a typo found only once the database
// was created and migrated would hide behind any trouble with it.
func (c *Config) validateAddresses() error {
	if _, err := dnscheck.ParseResolvers(c.DNSResolvers); err != nil {
		return invalid("dns-resolvers", "%v", err)
	}
	for _, s := range []setting[string]{{"trusted-proxies", c.TrustedProxies}, {"egress-allow-cidrs", c.EgressAllowCIDRs}} {
		if _, err := egress.ParseCIDRs(s.value); err != nil {
			return invalid(s.flag, "%v", err)
		}
	}
	if c.EgressResolver != "" {
		if _, err := c.EgressResolverAddr(); err != nil {
			return err
		}
	}
	// The AWS clients take these as they are and fail only at their first
	// request: a feedback queue that warns every few seconds, or blob
	// storage failing every send.
	for _, s := range []setting[string]{{"ses-endpoint", c.SESEndpoint}, {"ses-events-queue-url", c.SESEventsQueueURL},
		{"blob-s3-endpoint", c.BlobS3Endpoint}} {
		if s.value == "" {
			continue
		}
		u, err := url.Parse(s.value)
		if err == nil && u.User != nil {
			// Not quoted: it may hold a password.
			return invalid(s.flag, "holds credentials, which the AWS credential chain gives instead (AWS_ACCESS_KEY_ID, a profile or a role)")
		}
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return invalid(s.flag, "%q is not an http:// or https:// URL with a host", s.value)
		}
	}
	return nil
}

// EgressResolverAddr is the DNS server of egress-resolver as it is dialled:
// host:port, a bare IP address meaning port 53.
func (c *Config) EgressResolverAddr() (string, error) {
	addrs, err := dnscheck.ParseResolvers(c.EgressResolver)
	if err != nil || len(addrs) != 1 {
		return "", invalid("egress-resolver", "%q is not one DNS server as host:port (or an IP address, meaning port 53)", c.EgressResolver)
	}
	return addrs[0], nil
}

// clamdAddrValid accepts the forms the scanner dials: "unix:/path",
// "unix:///path", "tcp://host:port" and "host:port". It is checked at start,
// as a typo would otherwise surface only as every email waiting on a scan.
func clamdAddrValid(addr string) bool {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		return strings.HasPrefix(path, "/") && strings.Trim(path, "/") != ""
	}
	host, port, err := net.SplitHostPort(strings.TrimPrefix(addr, "tcp://"))
	n, perr := strconv.Atoi(port)
	return err == nil && host != "" && !strings.ContainsAny(host, "/") && perr == nil && n >= 1 && n <= 65535
}

// maxQueueWorkers is the most workers a job queue takes (River's
// QueueNumWorkersMax).
const maxQueueWorkers = 10000

// maxBodyBytes is the API's request body limit (httpserver.MaxBodyBytes): a
// smaller cap on bytes in flight would refuse every large request.
const maxBodyBytes = 45 << 20

// minSendingBytes is the least bound on a worker's attachment bytes that
// is of use: its quarter, kept for emails with under 1 MiB of attachments,
// holds one of them. Smaller, every email would go out alone, which is
// rather a unit mistaken (KiB for MiB) than a wish.
const minSendingBytes = 4 << 20

// MasterKeyFile is the file a development master key is read from (and
// generated into when missing); "" when the key is given or required.
func (c *Config) MasterKeyFile() string {
	if c.MasterKey != "" || c.Environment == "production" {
		return ""
	}
	return filepath.Join(c.DataDir, "master.key")
}

// LoadMasterKey returns the 32-byte master key. In development a missing key
// is generated into <data-dir>/master.key and reused after; in production it
// must be given. generated says this call made the key (and its file).
func (c *Config) LoadMasterKey() (key []byte, generated bool, err error) {
	if c.MasterKey != "" {
		k, err := decodeKey(c.MasterKey)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", Setting("master-key"), err)
		}
		return k, false, nil
	}
	if c.Environment == "production" {
		return nil, false, invalid("master-key", "required in production (64 hex characters)")
	}
	path := c.MasterKeyFile()
	if k, err := readKeyFile(path); !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	key = make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, false, err
	}
	// Written aside, then linked into place, which fails if the file
	// exists: processes started at once all take the first one's key
	// instead of each overwriting the file with its own (what the others
	// sealed would be lost), and none reads a file half written.
	tmp, err := os.CreateTemp(c.DataDir, ".master.key-*")
	if err != nil {
		return nil, false, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Sync() // on disk before any process seals under it
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		k, err := readKeyFile(path)
		return k, false, err
	} else if err != nil {
		return nil, false, err
	}
	return key, true, nil
}

// readKeyFile reads a development master key file; a missing one is
// fs.ErrNotExist, any other trouble (unreadable, not a key) an error that
// names the file and never leads to a new key over it.
func readKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := decodeKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadPreviousKeys returns the keys of MAILROOM_MASTER_KEY_PREVIOUS.
func (c *Config) LoadPreviousKeys() ([][]byte, error) {
	var keys [][]byte
	for _, s := range strings.Split(c.MasterKeyPrevious, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		k, err := decodeKey(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", Setting("master-key-previous"), err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func decodeKey(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return nil, errors.New("a master key must be 64 hex characters (32 bytes)")
	}
	return b, nil
}

// envAnnotation is the flag annotation naming a flag's variable.
const envAnnotation = "mailroom_env"

// secretNote ends the help of settings that may carry secrets.
const secretNote = "; give it through the variable: command-line values are visible to every user of the machine (ps)"

func usage(env, text string) string { return text + " [" + env + "]" }

func bind(fs *pflag.FlagSet, name, env string) {
	_ = fs.SetAnnotation(name, envAnnotation, []string{env}) // the flag was just defined
}

func str(fs *pflag.FlagSet, p *string, name, env, def, text string) {
	fs.StringVar(p, name, def, usage(env, text))
	bind(fs, name, env)
}

func (c *Config) boolean(fs *pflag.FlagSet, p *bool, name, env string, def bool, text string) {
	fs.BoolVar(p, name, def, usage(env, text))
	bind(fs, name, env)
}

func (c *Config) integer(fs *pflag.FlagSet, p *int, name, env string, def int, text string) {
	*p = def
	fs.Var(decimal[int]{p, "int", strconv.IntSize}, name, usage(env, text))
	bind(fs, name, env)
}

func (c *Config) int64Flag(fs *pflag.FlagSet, p *int64, name, env string, def int64, text string) {
	*p = def
	fs.Var(decimal[int64]{p, "int64", 64}, name, usage(env, text))
	bind(fs, name, env)
}

// decimal is a whole-number flag read in base 10 only. pflag's own reads
// a leading 0 as octal and 0x as hex: MAILROOM_RETENTION_DAYS=045 would
// keep emails 37 days.
type decimal[T int | int64] struct {
	p        *T
	typeName string // "int" or "int64", as pflag names them
	bits     int
}

func (d decimal[T]) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, d.bits)
	if err != nil {
		return err
	}
	*d.p = T(v)
	return nil
}

func (d decimal[T]) String() string { return strconv.FormatInt(int64(*d.p), 10) }

func (d decimal[T]) Type() string { return d.typeName }

func (c *Config) float(fs *pflag.FlagSet, p *float64, name, env string, def float64, text string) {
	fs.Float64Var(p, name, def, usage(env, text))
	bind(fs, name, env)
}

func (c *Config) duration(fs *pflag.FlagSet, p *time.Duration, name, env string, def time.Duration, text string) {
	fs.DurationVar(p, name, def, usage(env, text))
	bind(fs, name, env)
}

func list(fs *pflag.FlagSet, p *[]string, name, env string, def []string, text string) {
	fs.StringSliceVar(p, name, def, usage(env, text))
	bind(fs, name, env)
}

// ApplyEnv sets every flag of fs that the command line left unset from its
// MAILROOM_* variable, so a flag given on the command line wins. A value
// that does not parse leaves the default in place and is reported by
// Validate. An empty variable counts as unset, as env files write one
// (`MAILROOM_BOOTSTRAP=`) to leave the default in place.
func (c *Config) ApplyEnv(fs *pflag.FlagSet) {
	c.envErrors = nil
	settings := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		names := f.Annotations[envAnnotation]
		if len(names) == 1 {
			settings[names[0]] = true
		}
		if len(names) != 1 || f.Changed {
			return
		}
		v, ok := os.LookupEnv(names[0])
		if !ok || v == "" {
			return
		}
		// Value.Set, not fs.Set: the flag stays "not given on the command line".
		if err := f.Value.Set(v); err != nil {
			if want := wanted(f.Value.Type()); want != "" {
				err = fmt.Errorf("%q is not %s", v, want)
			}
			c.envErrors = append(c.envErrors, fmt.Errorf("%s (%s): %w", f.Name, names[0], err))
		}
	})
	c.unknownEnv, c.meant = nil, map[string]string{}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "MAILROOM_") && !settings[name] && !notSetting(name) {
			c.unknownEnv = append(c.unknownEnv, name)
			if m := closest(name, settings); m != "" {
				c.meant[name] = m
			}
		}
	}
	slices.Sort(c.unknownEnv)
}

// closest is the setting variable that name most likely misspells: the
// nearest by edit distance, if within two edits (a letter left out,
// doubled or swapped), else "".
func closest(name string, settings map[string]bool) string {
	best, bestDist := "", 3
	for s := range settings {
		if d := levenshtein.ComputeDistance(name, s); d < bestDist || (d == bestDist && s < best) {
			best, bestDist = s, d
		}
	}
	return best
}

// Cautions lists what a serving process warns of at start, so that a
// setting likely to be a mistake shows in its logs: settings the chosen
// provider or blob storage never reads, address ranges wider than they
// seem, the egress exceptions in development (production refuses them),
// and in production the sandbox provider, which sends nothing, and the
// bootstrap, which prints credentials.
func (c *Config) Cautions() []string {
	var out []string
	if unused := c.unused(); len(unused) > 0 {
		out = append(out, "settings without effect: "+strings.Join(unused, "; "))
	}
	out = append(out, c.wideCIDRs()...)
	if c.Environment == "production" {
		if c.Provider == "sandbox" {
			out = append(out, "the sandbox provider sends nothing: every email is written to "+Setting("sandbox-outbox")+
				" and recorded as delivered; set "+Setting("provider")+" to ses or smtp")
		}
		if c.Bootstrap {
			out = append(out, Setting("bootstrap")+" prints a first account's credentials to standard output, "+
				"where logs keep them; in production create accounts with `mailroom accounts create`")
		}
		return out
	}
	if dev := c.devEgress(); len(dev) > 0 {
		out = append(out, "development-only settings let webhooks and attachment downloads reach what production refuses: "+
			strings.Join(dev, ", "))
	}
	return out
}

// devEgress names the egress exceptions given, each with its value: they
// suit development only.
func (c *Config) devEgress() []string {
	var dev []string
	if c.EgressAllowCIDRs != "" {
		dev = append(dev, Setting("egress-allow-cidrs")+"="+c.EgressAllowCIDRs)
	}
	if c.EgressResolver != "" {
		dev = append(dev, Setting("egress-resolver")+"="+c.EgressResolver)
	}
	if c.WebhookAllowHTTP {
		dev = append(dev, Setting("webhook-allow-http")+"=true")
	}
	return dev
}

// wideCIDRs describes the address ranges that take in more than they
// seem to: a CIDR with bits set past its length is read as its whole
// network (10.0.0.5/8 is all of 10.0.0.0/8), and a proxy range of every
// address lets any client name its own address for the per-IP limit.
func (c *Config) wideCIDRs() []string {
	var out []string
	for _, s := range []setting[string]{{"trusted-proxies", c.TrustedProxies}, {"egress-allow-cidrs", c.EgressAllowCIDRs}} {
		for _, part := range strings.Split(s.value, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(part))
			if err != nil {
				continue // an address alone, or nothing (Validate refuses the rest)
			}
			if p != p.Masked() {
				out = append(out, fmt.Sprintf("%s: %s is read as %s, the whole network (write %s for one address)",
					Setting(s.flag), p, p.Masked(), netip.PrefixFrom(p.Addr(), p.Addr().BitLen())))
			}
			if s.flag == "trusted-proxies" && p.Bits() == 0 {
				out = append(out, fmt.Sprintf("%s: %s trusts every address: any client can name its own address in X-Forwarded-For and pass the per-IP limit",
					Setting(s.flag), p))
			}
		}
	}
	return out
}

// unused names the settings given that the chosen provider and blob
// storage never read: a relay URL without the smtp provider sends
// nothing through it, an S3 endpoint without a bucket stores on the
// filesystem.
func (c *Config) unused() []string {
	var out []string
	add := func(given bool, flag, why string) {
		if given {
			out = append(out, Setting(flag)+" "+why)
		}
	}
	provider := "with provider " + c.Provider
	add(c.Provider != "smtp" && c.SMTPURL != "", "smtp-url", provider)
	for _, s := range []setting[string]{{"ses-configuration-set", c.SESConfigSet}, {"ses-events-queue-url", c.SESEventsQueueURL}, {"ses-endpoint", c.SESEndpoint}} {
		add(c.Provider != "ses" && s.value != "", s.flag, provider)
	}
	add(c.Provider != "sandbox" && c.SandboxLatency != 0, "sandbox-latency", provider)
	for _, s := range []setting[string]{{"blob-s3-prefix", c.BlobS3Prefix}, {"blob-s3-endpoint", c.BlobS3Endpoint}} {
		add(c.BlobS3Bucket == "" && s.value != "", s.flag, "without "+Setting("blob-s3-bucket"))
	}
	return out
}

// UnknownVariables lists the MAILROOM_* variables of the environment that
// name no setting: misspelt, most likely (MAILROOM_RATE_LIMT), and then
// quietly without effect.
func (c *Config) UnknownVariables() []string { return c.unknownEnv }

// Meant is the setting's variable an unknown variable is most likely a
// misspelling of (MAILROOM_RATE_LIMT: MAILROOM_RATE_LIMIT), or "".
func (c *Config) Meant(name string) string { return c.meant[name] }

// notSetting reports whether a MAILROOM_* variable is one Mailroom's
// tests, benchmarks, example receiver or Compose file read.
func notSetting(name string) bool {
	for _, prefix := range []string{"MAILROOM_TEST_", "MAILROOM_BENCH_", "MAILROOM_SES_LOCAL_"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return name == "MAILROOM_ENV_FILE" || name == "MAILROOM_VERSION" || name == "MAILROOM_WEBHOOK_SECRET"
}

// wanted describes the values a flag type takes, for a variable that holds
// none of them (the parser's own words name Go functions).
func wanted(flagType string) string {
	switch flagType {
	case "int", "int64":
		return "a whole number"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration such as 500ms, 30s or 5m"
	}
	return ""
}

// RetrySchedule parses the webhook retry schedule.
func (c *Config) RetrySchedule() ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(c.WebhookRetries, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, invalid("webhook-retry-schedule", "%q is not a positive duration", part)
		}
		out = append(out, d)
	}
	return out, nil
}
