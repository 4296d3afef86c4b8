// Package ses is the Amazon SES v2 mail provider: sending (SendEmail with the
// raw MIME message), sending identities (BYODKIM, custom MAIL FROM) and
// provider feedback (SES event publishing → SNS → SQS, long-polled).
//
// Credentials come from the AWS default chain (environment, shared config,
// SSO, web identity, container or instance role). Config.Endpoint overrides
// the service endpoints (SES, SQS and the STS call that names the account),
// for emulators and test fakes.
package ses

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/mailroom/mailroom/internal/provider"

	"github.com/mailroom/mailroom/internal/awsconf"
)

// Config selects the region, the configuration set and the events queue.
type Config struct {
	// Region overrides the region from the default chain (AWS_REGION, ...).
	Region string
	// Endpoint is an optional base URL that replaces both the SES v2 and the
	// SQS endpoints (an emulator or a fake).
	Endpoint string
	// ConfigurationSet is sent with every message; its event destination
	// publishes the events PollFeedback reads.
	ConfigurationSet string
	// EventsQueueURL is the SQS queue subscribed to the configuration set's
	// SNS topic. Only PollFeedback needs it.
	EventsQueueURL string
	// Logger receives poller diagnostics; slog.Default() when nil.
	Logger *slog.Logger
}

// Provider talks to SES v2 and SQS. It implements provider.Sender and
// provider.Identities.
type Provider struct {
	ses    *sesv2.Client
	sqs    *sqs.Client
	sts    *sts.Client
	cfg    Config
	logger *slog.Logger

	// arnMu guards arnPrefix, the start of the account's identity ARNs
	// (arn:aws:ses:<region>:<account>:identity/), learnt from STS the first
	// time an identity without an owner is tagged: no SES answer names the
	// account.
	arnMu     sync.Mutex
	arnPrefix string
}

var (
	_ provider.Sender     = (*Provider)(nil)
	_ provider.Identities = (*Provider)(nil)
)

// New builds the provider. It does not contact AWS.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	return newProvider(ctx, cfg)
}

// newProvider is New with extra load options, which tests use for static
// credentials and the live test for a named profile.
func newProvider(ctx context.Context, cfg Config, extra ...func(*config.LoadOptions) error) (*Provider, error) {
	awsCfg, err := awsconf.Load(ctx, cfg.Region, extra...)
	if err != nil {
		return nil, fmt.Errorf("ses: %w", err)
	}
	sesClient := sesv2.NewFromConfig(awsCfg, func(o *sesv2.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	sqsClient := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	stsClient := sts.NewFromConfig(awsCfg, func(o *sts.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Provider{ses: sesClient, sqs: sqsClient, sts: stsClient, cfg: cfg, logger: logger}, nil
}
