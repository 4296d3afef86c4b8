// Package awsconf loads the AWS configuration the way every Mailroom AWS
// adapter needs it: the default credential chain, Mailroom's region when
// given, and a clear error when no region is known.
package awsconf

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Load returns the AWS configuration for region ("" leaves it to AWS_REGION
// and the shared config). extra load options come last; tests use them for
// static credentials.
func Load(ctx context.Context, region string, extra ...func(*config.LoadOptions) error) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, append(opts, extra...)...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, errors.New("no AWS region (set MAILROOM_REGION or AWS_REGION)")
	}
	return cfg, nil
}
