package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/mailroom/mailroom/internal/awsconf"
)

// S3Config selects the bucket and, optionally, an S3-compatible endpoint.
// Credentials come from the AWS default chain (environment, shared config,
// SSO, web identity, container or instance role).
type S3Config struct {
	Bucket string
	// Prefix is prepended to every key; a missing trailing "/" is added,
	// so "mailroom" and "mailroom/" both give "mailroom/sha256/<hex>".
	Prefix string
	// Region overrides the region from the default chain (AWS_REGION, ...).
	Region string
	// Endpoint is an optional base URL, for MinIO and other emulators.
	Endpoint string
	// PathStyle addresses objects as <endpoint>/<bucket>/<key> instead of
	// <bucket>.<endpoint>/<key>; most emulators need it.
	PathStyle bool
}

// S3 stores blobs as objects named Prefix + "sha256/<hex>".
//
// Put is a single conditional PutObject (If-None-Match: "*"): a blob that is
// already there is not uploaded over, and the upload carries the SHA-256 as
// its x-amz-checksum-sha256, so S3 itself rejects bytes damaged in transit.
// Get re-hashes what it downloads.
type S3 struct {
	client *s3.Client
	bucket string
	prefix string
}

var _ Store = (*S3)(nil)

// NewS3 builds the S3 store. It does not contact S3.
func NewS3(cfg S3Config) (*S3, error) {
	return newS3(context.Background(), cfg)
}

// newS3 is NewS3 with extra load options, which tests use for static
// credentials.
func newS3(ctx context.Context, cfg S3Config, extra ...func(*config.LoadOptions) error) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("blob: NewS3: bucket is required")
	}
	awsCfg, err := awsconf.Load(ctx, cfg.Region, extra...)
	if err != nil {
		return nil, fmt.Errorf("blob: NewS3: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Get verifies the SHA-256 itself; without this the SDK logs a line
		// for every object that comes back without an S3 checksum header.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	prefix := cfg.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &S3{client: client, bucket: cfg.Bucket, prefix: prefix}, nil
}

func (s *S3) key(d Digest) string { return s.prefix + "sha256/" + d.Hex() }

// conflictRetries bounds retries of a 409 ConditionalRequestConflict, which
// S3 returns when another conditional write of the same key is in flight.
const conflictRetries = 3

// Put uploads data unless an object with its digest already exists.
func (s *S3) Put(ctx context.Context, data []byte) (Digest, error) {
	d := DigestOf(data)
	sum := sha256.Sum256(data)
	for attempt := 0; ; attempt++ {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:         aws.String(s.bucket),
			Key:            aws.String(s.key(d)),
			Body:           bytes.NewReader(data),
			ContentLength:  aws.Int64(int64(len(data))),
			ContentType:    aws.String("application/octet-stream"),
			IfNoneMatch:    aws.String("*"),
			ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
		})
		if err == nil {
			return d, nil
		}
		switch code, status := apiError(err); {
		case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
			return d, nil // already stored; same key means same bytes
		case (code == "ConditionalRequestConflict" || status == http.StatusConflict) && attempt < conflictRetries:
			continue
		}
		return "", fmt.Errorf("blob: put %s to s3://%s/%s: %w", d, s.bucket, s.key(d), err)
	}
}

// Get downloads the object and checks it against its digest.
func (s *S3) Get(ctx context.Context, d Digest) ([]byte, error) {
	if _, err := ParseDigest(string(d)); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(d)),
	})
	if err != nil {
		if isNoSuchKey(err) {
			return nil, fmt.Errorf("blob %s: %w", d, ErrNotFound)
		}
		return nil, fmt.Errorf("blob: get %s from s3://%s/%s: %w", d, s.bucket, s.key(d), err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("blob: get %s from s3://%s/%s: %w", d, s.bucket, s.key(d), err)
	}
	if err := verify(d, data); err != nil {
		return nil, err
	}
	return data, nil
}

// Delete removes the object. S3 answers a delete of a missing key with
// success, so Delete is idempotent as it stands.
func (s *S3) Delete(ctx context.Context, d Digest) error {
	if _, err := ParseDigest(string(d)); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(d)),
	})
	if err != nil && !isNoSuchKey(err) {
		return fmt.Errorf("blob: delete %s from s3://%s/%s: %w", d, s.bucket, s.key(d), err)
	}
	return nil
}

// isNoSuchKey reports whether err means the object does not exist. A 404 for
// a missing bucket is a configuration error, not a missing blob.
func isNoSuchKey(err error) bool {
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return true
	}
	code, status := apiError(err)
	return code == "NoSuchKey" || (status == http.StatusNotFound && (code == "" || code == "NotFound"))
}

// apiError returns the service error code and HTTP status of err, when known.
func apiError(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}
