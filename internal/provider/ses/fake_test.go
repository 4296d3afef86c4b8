package ses

import (
	"context"
	"log/slog"
	"testing"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mailroom/mailroom/internal/provider/ses/sesfake"
)

// fakeAWS adapts the protocol-level fake (package sesfake) to these tests.
type fakeAWS struct {
	*sesfake.Server
	t *testing.T
}

type (
	fakeError   = sesfake.Error
	fakeRequest = sesfake.Request
)

func newFakeAWS(t *testing.T) *fakeAWS { return &fakeAWS{Server: sesfake.Start(t), t: t} }

// provider returns a Provider pointed at the fake with static credentials
// and no SDK retries (so error-mapping tests see the first answer).
func (f *fakeAWS) provider(queueURL string) *Provider {
	f.t.Helper()
	p, err := newProvider(context.Background(), Config{
		Region:           "us-east-1",
		Endpoint:         f.URL(),
		ConfigurationSet: "mailroom-events",
		EventsQueueURL:   queueURL,
		Logger:           slog.New(slog.DiscardHandler),
	},
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKIDFAKE", "fake-secret", "")),
		config.WithRetryMaxAttempts(1),
	)
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fakeAWS) failNext(key string, e fakeError) { f.FailNext(key, e) }
func (f *fakeAWS) recorded() []fakeRequest          { return f.Recorded() }
func (f *fakeAWS) enqueue(body string) string       { return f.Enqueue(body) }
func (f *fakeAWS) expireVisibility()                { f.ExpireVisibility() }
func (f *fakeAWS) log() []string                    { return f.Log() }
