package blob

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mailroom/mailroom/internal/blob/s3fake"
)

const (
	fakeAccessKey = "AKIAFAKEFAKEFAKE0000"
	fakeSecret    = "fake/secret/key/for/tests/only/0000000000"
	fakeRegion    = "eu-west-1"
	fakeBucket    = "mailroom-blobs"
)

// isolateAWSEnv keeps the developer's AWS profile, files and endpoint
// overrides out of a test.
func isolateAWSEnv(t *testing.T) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	for _, k := range []string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// testLoadOptions gives the adapter static credentials and the SDK's
// standard retryer without backoff sleeps.
func testLoadOptions(extra ...func(*config.LoadOptions) error) []func(*config.LoadOptions) error {
	return append([]func(*config.LoadOptions) error{
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(fakeAccessKey, fakeSecret, "")),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
			})
		}),
	}, extra...)
}

// newFakeBackedS3 returns the real S3 adapter talking to a fake S3 over
// plain HTTP.
func newFakeBackedS3(t *testing.T, prefix string) (*S3, *s3fake.Server) {
	t.Helper()
	isolateAWSEnv(t)
	fake := s3fake.New(t, fakeAccessKey, fakeRegion, fakeBucket, false)
	s, err := newS3(context.Background(), S3Config{
		Bucket: fakeBucket, Prefix: prefix, Region: fakeRegion,
		Endpoint: fake.URL(), PathStyle: true,
	}, testLoadOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	return s, fake
}

// TestS3OverTLS runs the adapter over HTTPS, as in production, where the SDK
// signs requests differently than over plain HTTP.
func TestS3OverTLS(t *testing.T) {
	isolateAWSEnv(t)
	fake := s3fake.New(t, fakeAccessKey, fakeRegion, fakeBucket, true)
	s, err := newS3(context.Background(), S3Config{
		Bucket: fakeBucket, Region: fakeRegion, Endpoint: fake.URL(), PathStyle: true,
	}, testLoadOptions(config.WithHTTPClient(fake.Client()))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := bytes.Repeat([]byte("tls "), 100_000)
	d, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get over TLS: %d bytes, %v", len(got), err)
	}
	if ok := countRequests(fake.Requests(), http.MethodPut, http.StatusOK); ok != 1 {
		t.Errorf("%d successful PUTs, want 1: %+v", ok, fake.Requests())
	}
}

func countRequests(log []s3fake.Request, method string, status int) int {
	n := 0
	for _, r := range log {
		if r.Method == method && r.Status == status {
			n++
		}
	}
	return n
}

func TestS3RoundTrip(t *testing.T) {
	s, fake := newFakeBackedS3(t, "mailroom") // no trailing slash: one is added
	ctx := context.Background()
	var want []string
	for _, data := range [][]byte{[]byte("<p>Hello</p>"), {}, bytes.Repeat([]byte{0, 1, 2, 255}, 1<<18)} {
		d, err := s.Put(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		if d != DigestOf(data) {
			t.Fatalf("Put digest %s, want %s", d, DigestOf(data))
		}
		stored, ok := fake.Object("mailroom/sha256/" + d.Hex())
		if !ok || !bytes.Equal(stored, data) {
			t.Fatalf("object not stored under mailroom/sha256/<hex> (ok=%v, %d bytes); requests: %+v", ok, len(stored), fake.Requests())
		}
		got, err := s.Get(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("Get returned %d bytes, want %d", len(got), len(data))
		}
		want = append(want, "mailroom/sha256/"+d.Hex())
	}
	slices.Sort(want)
	if keys := fake.Keys(); !slices.Equal(keys, want) {
		t.Fatalf("bucket holds %q, want %q", keys, want)
	}
}

func TestS3SameBytesStoredOnce(t *testing.T) {
	s, fake := newFakeBackedS3(t, "")
	ctx := context.Background()
	data := []byte("same attachment")
	d1, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := s.Put(ctx, data)
	if err != nil {
		t.Fatalf("second Put: %v", err)
	}
	if d1 != d2 {
		t.Fatalf("digests differ: %s %s", d1, d2)
	}
	log := fake.Requests()
	if ok := countRequests(log, http.MethodPut, http.StatusOK); ok != 1 {
		t.Errorf("%d successful PUTs, want 1; requests: %+v", ok, log)
	}
	if pf := countRequests(log, http.MethodPut, http.StatusPreconditionFailed); pf != 1 {
		t.Errorf("%d PUTs refused by If-None-Match, want 1; requests: %+v", pf, log)
	}
	if _, ok := fake.Object("sha256/" + d1.Hex()); !ok {
		t.Error("no prefix: object should be at sha256/<hex>")
	}
}

func TestS3ConcurrentPutsOfSameBlob(t *testing.T) {
	s, fake := newFakeBackedS3(t, "p/")
	ctx := context.Background()
	data := bytes.Repeat([]byte("logo "), 10_000)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Put(ctx, data)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ok := countRequests(fake.Requests(), http.MethodPut, http.StatusOK); ok != 1 {
		t.Errorf("%d successful PUTs, want 1", ok)
	}
}

func TestS3ConditionalConflictIsRetried(t *testing.T) {
	s, fake := newFakeBackedS3(t, "")
	fake.FailNext(1, http.StatusConflict, "ConditionalRequestConflict")
	data := []byte("racing writer")
	if _, err := s.Put(context.Background(), data); err != nil {
		t.Fatalf("Put after a 409 conflict: %v", err)
	}
	if _, ok := fake.Object("sha256/" + DigestOf(data).Hex()); !ok {
		t.Fatal("object not stored after retry")
	}
}

func TestS3Missing(t *testing.T) {
	s, _ := newFakeBackedS3(t, "")
	_, err := s.Get(context.Background(), DigestOf([]byte("never stored")))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of missing blob = %v, want ErrNotFound", err)
	}
}

func TestS3MissingBucketIsNotAMissingBlob(t *testing.T) {
	isolateAWSEnv(t)
	fake := s3fake.New(t, fakeAccessKey, fakeRegion, fakeBucket, false)
	s, err := newS3(context.Background(), S3Config{Bucket: "no-such-bucket", Region: fakeRegion, Endpoint: fake.URL(), PathStyle: true},
		testLoadOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(context.Background(), DigestOf([]byte("x")))
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get from a missing bucket = %v, want a non-NotFound error", err)
	}
	if !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Errorf("error should name the cause: %v", err)
	}
}

func TestS3CorruptedObject(t *testing.T) {
	s, fake := newFakeBackedS3(t, "")
	ctx := context.Background()
	data := []byte("invoice body")
	d, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(data)
	bad[0] ^= 0x20
	fake.SetObject("sha256/"+d.Hex(), bad)
	if _, err := s.Get(ctx, d); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of corrupted object = %v, want ErrCorrupt", err)
	}
}

func TestS3ServerErrors(t *testing.T) {
	s, fake := newFakeBackedS3(t, "")
	ctx := context.Background()
	fake.FailNext(100, http.StatusInternalServerError, "InternalError")
	if _, err := s.Put(ctx, []byte("x")); err == nil {
		t.Fatal("Put against a failing server: want error")
	}
	_, err := s.Get(ctx, DigestOf([]byte("x")))
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get against a failing server = %v, want a non-NotFound error", err)
	}
	// A transient failure is retried by the SDK.
	fake.FailNext(1, http.StatusServiceUnavailable, "SlowDown")
	if _, err := s.Put(ctx, []byte("y")); err != nil {
		t.Fatalf("Put after one 503: %v", err)
	}
}

func TestS3Delete(t *testing.T) {
	s, fake := newFakeBackedS3(t, "mailroom/")
	ctx := context.Background()
	kept := checkDelete(t, s, func(kept Digest) {
		if keys := fake.Keys(); !slices.Equal(keys, []string{"mailroom/sha256/" + kept.Hex()}) {
			t.Fatalf("bucket holds %q, want only the other blob", keys)
		}
	})
	if n := countRequests(fake.Requests(), http.MethodDelete, http.StatusNoContent); n != 3 {
		t.Errorf("%d DELETEs answered 204, want 3: %+v", n, fake.Requests())
	}
	// A failing server is an error, not a deleted blob.
	fake.FailNext(100, http.StatusInternalServerError, "InternalError")
	if err := s.Delete(ctx, kept); err == nil {
		t.Fatal("Delete against a failing server: want error")
	}
}

func TestS3InvalidDigest(t *testing.T) {
	s, fake := newFakeBackedS3(t, "")
	if _, err := s.Get(context.Background(), "sha256:../../x"); err == nil {
		t.Fatal("want error")
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("malformed digest reached S3 (%d requests)", n)
	}
}

func TestNewS3Config(t *testing.T) {
	isolateAWSEnv(t)
	if _, err := NewS3(S3Config{Region: "us-east-1"}); err == nil {
		t.Error("NewS3 without bucket: want error")
	}
	if _, err := NewS3(S3Config{Bucket: "b"}); err == nil {
		t.Error("NewS3 with no region anywhere: want error")
	}
	t.Setenv("AWS_REGION", "eu-central-1")
	if _, err := NewS3(S3Config{Bucket: "b"}); err != nil {
		t.Errorf("NewS3 with region from the environment: %v", err)
	}
}

// TestS3Live runs against a real bucket when MAILROOM_TEST_S3_BUCKET is set,
// with credentials and region from the AWS default chain
// (MAILROOM_TEST_S3_ENDPOINT and MAILROOM_TEST_S3_PATH_STYLE=true for MinIO).
func TestS3Live(t *testing.T) {
	bucket := os.Getenv("MAILROOM_TEST_S3_BUCKET")
	if bucket == "" {
		t.Log("MAILROOM_TEST_S3_BUCKET not set; live S3 test not run")
		return
	}
	prefix := "mailroom-test/" + time.Now().UTC().Format("20060102T150405.000000000") + "/"
	s, err := NewS3(S3Config{
		Bucket: bucket, Prefix: prefix,
		Endpoint:  os.Getenv("MAILROOM_TEST_S3_ENDPOINT"),
		PathStyle: os.Getenv("MAILROOM_TEST_S3_PATH_STYLE") == "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := []byte("mailroom live S3 test " + prefix)
	d, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, err := s.client.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(s.key(d))})
		if err != nil {
			t.Logf("cleanup of s3://%s/%s: %v", bucket, s.key(d), err)
		}
	})
	if d2, err := s.Put(ctx, data); err != nil || d2 != d {
		t.Fatalf("second Put: %s, %v", d2, err)
	}
	got, err := s.Get(ctx, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %q, %v", got, err)
	}
	if _, err := s.Get(ctx, DigestOf([]byte("never stored "+prefix))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of missing blob = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, d); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
}
