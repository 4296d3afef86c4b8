package ses

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/provider/ses/sesemulator"
)

// TestSendToEmulator sends through aws-ses-v2-local (npm), a local SES v2
// emulator, and reads the message back from its GET /store endpoint.
//
// The emulator is found as MAILROOM_SES_LOCAL_URL (already running), else
// started from MAILROOM_SES_LOCAL_BIN or `aws-ses-v2-local` on PATH
// (`npm install aws-ses-v2-local`). Without either the test logs and returns.
//
// The emulator re-parses the raw MIME and stores from/to/subject/body; it
// keeps neither the message tags nor the Destination envelope, so the tag is
// checked on the fake (TestSendCarriesRawContentConfigurationSetAndTags).
func TestSendToEmulator(t *testing.T) {
	base := os.Getenv("MAILROOM_SES_LOCAL_URL")
	if base == "" {
		base = startEmulator(t)
		if base == "" {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := newProvider(ctx, Config{Region: "us-east-1", Endpoint: base, ConfigurationSet: "mailroom-events"},
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKIDLOCAL", "local", "")))
	if err != nil {
		t.Fatal(err)
	}
	subject := fmt.Sprintf("emulator test %d", time.Now().UnixNano())
	raw := "From: Mailroom Test <sender@example.com>\r\nTo: rcpt@example.net\r\nSubject: " + subject +
		"\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n" +
		"--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello text\r\n" +
		"--b1\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>hello html</p>\r\n--b1--\r\n"
	id, err := p.Send(ctx, provider.Outbound{
		EmailID: "em_emulator", From: "sender@example.com", Recipients: []string{"rcpt@example.net"},
		Raw: []byte(raw), Tags: map[string]string{"kind": "test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if id == "" {
		t.Fatal("no message id")
	}
	e := sesemulator.Stored(t, base, id)
	// The sender keeps its display name: with no FromEmailAddress, SES
	// reads the sender from the From header.
	if e.Subject != subject || !strings.Contains(e.From, "Mailroom Test") || !strings.Contains(e.From, "sender@example.com") ||
		len(e.Destination.To) != 1 || !strings.Contains(e.Destination.To[0], "rcpt@example.net") ||
		!strings.Contains(e.Body.Text, "hello text") || !strings.Contains(e.Body.HTML, "hello html") {
		t.Errorf("stored email = %+v", e)
	}
}

func startEmulator(t *testing.T) string { return sesemulator.Start(t) }
