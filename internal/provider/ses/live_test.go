package ses

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/mailroom/mailroom/internal/provider"
)

// TestLiveSES runs against real SES when MAILROOM_TEST_AWS_PROFILE names a
// shared-config profile. Region: MAILROOM_TEST_AWS_REGION (else the
// profile's). It only makes calls without lasting effects: reads and deletes
// an identity that does not exist, and, when MAILROOM_TEST_SES_FROM is a
// verified sender, sends one message to the SES mailbox simulator
// (success@simulator.amazonses.com), with MAILROOM_TEST_SES_CONFIGURATION_SET
// if set.
func TestLiveSES(t *testing.T) {
	profile := os.Getenv("MAILROOM_TEST_AWS_PROFILE")
	if profile == "" {
		t.Log("MAILROOM_TEST_AWS_PROFILE not set; live SES test not run")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := newProvider(ctx, Config{
		Region:           os.Getenv("MAILROOM_TEST_AWS_REGION"),
		ConfigurationSet: os.Getenv("MAILROOM_TEST_SES_CONFIGURATION_SET"),
	}, config.WithSharedConfigProfile(profile))
	if err != nil {
		t.Fatal(err)
	}
	const missing = "mailroom-live-test.invalid"
	st, err := p.GetIdentityStatus(ctx, missing)
	if err != nil || st.Exists {
		t.Fatalf("GetIdentityStatus(%s) = %+v, %v", missing, st, err)
	}
	if err := p.DeleteIdentity(ctx, "", missing); err != nil {
		t.Fatalf("DeleteIdentity of a missing identity: %v", err)
	}
	from := os.Getenv("MAILROOM_TEST_SES_FROM")
	if from == "" {
		t.Log("MAILROOM_TEST_SES_FROM not set; live send not run")
		return
	}
	raw := "From: " + from + "\r\nTo: success@simulator.amazonses.com\r\nSubject: mailroom live test\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello from the mailroom live test\r\n"
	id, err := p.Send(ctx, provider.Outbound{
		EmailID: "em_livetest", From: from, Recipients: []string{"success@simulator.amazonses.com"},
		Raw: []byte(raw), Tags: map[string]string{"test": "live"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent, SES message id %s", id)
}
