package ses

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/aws/smithy-go"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/provider"
)

// EmailIDTag is the SES message tag that carries the Mailroom email id. SES
// event publishing copies it into mail.tags of every event, which is how
// ParseFeedback maps feedback back onto the email.
const EmailIDTag = email.IDTag

// maxTagLen is SES's limit for a message tag name or value.
const maxTagLen = 256

// Send hands m to SES (SendEmail with raw content) and returns the SES
// message id.
//
// Error mapping: MessageRejected, MailFromDomainNotVerifiedException,
// AccountSuspendedException and BadRequestException are permanent
// (*provider.RejectedError with the SES message). Throttling
// (TooManyRequestsException, Throttling) asks to slow down
// (*provider.ThrottledError). Everything else is transient and retried by
// the caller: quotas (LimitExceededException, which lifts when the 24-hour window
// moves), SendingPausedException (an operator resumes sending; failing every
// queued email meanwhile would be worse), NotFoundException (a missing
// configuration set is an operator error that gets fixed), 5xx and timeouts.
// The SDK itself already retries throttling and 5xx a few times with backoff
// before Send returns.
func (p *Provider) Send(ctx context.Context, m provider.Outbound) (string, error) {
	// No FromEmailAddress: with raw content SES replaces the message's From
	// header with it, dropping the display name ("Acme <hello@acme.com>"
	// would reach recipients as "hello@acme.com"). Left out, SES takes the
	// sender from the From header, which names the same address.
	in := &sesv2.SendEmailInput{
		Content:     &types.EmailContent{Raw: &types.RawMessage{Data: m.Raw}},
		Destination: &types.Destination{ToAddresses: m.Recipients},
		EmailTags:   messageTags(m.EmailID, m.Tags),
	}
	if p.cfg.ConfigurationSet != "" {
		in.ConfigurationSetName = aws.String(p.cfg.ConfigurationSet)
	}
	out, err := p.ses.SendEmail(ctx, in)
	if err != nil {
		return "", mapSendError(err)
	}
	return aws.ToString(out.MessageId), nil
}

// messageTags builds the SES message tags: the email id first, then the
// email's own tags in name order. SES allows only ASCII letters, digits,
// "_" and "-" in names and values (at most 256 characters): other characters
// become "_", and a tag whose name or value is empty is dropped, as is a
// user tag that would shadow EmailIDTag.
func messageTags(emailID string, tags map[string]string) []types.MessageTag {
	out := []types.MessageTag{{Name: aws.String(EmailIDTag), Value: aws.String(SanitizeTag(emailID))}}
	names := make([]string, 0, len(tags))
	for k := range tags {
		names = append(names, k)
	}
	sort.Strings(names)
	seen := map[string]bool{EmailIDTag: true}
	for _, k := range names {
		name, value := SanitizeTag(k), SanitizeTag(tags[k])
		if name == "" || value == "" || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, types.MessageTag{Name: aws.String(name), Value: aws.String(value)})
	}
	return out
}

// SanitizeTag maps s onto SES's tag charset: ASCII letters, digits, "_" and
// "-"; any other character becomes "_"; the result is cut to 256 characters.
func SanitizeTag(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= maxTagLen {
			return b.String()
		}
	}
	return b.String()
}

// permanentSendErrors are the SES error codes that refuse a message for good.
var permanentSendErrors = map[string]bool{
	"MessageRejected":                    true,
	"MailFromDomainNotVerifiedException": true,
	"AccountSuspendedException":          true,
	"BadRequestException":                true,
}

// throttleErrors are the SES error codes that ask the sender to slow down.
var throttleErrors = map[string]bool{
	"TooManyRequestsException": true,
	"Throttling":               true,
	"ThrottlingException":      true,
}

func mapSendError(err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && permanentSendErrors[apiErr.ErrorCode()] {
		return &provider.RejectedError{Reason: apiMessage(apiErr.ErrorCode(), apiErr.ErrorMessage()), Code: apiErr.ErrorCode()}
	}
	if errors.As(err, &apiErr) && throttleErrors[apiErr.ErrorCode()] {
		return &provider.ThrottledError{Reason: apiMessage(apiErr.ErrorCode(), apiErr.ErrorMessage()), Err: err}
	}
	return fmt.Errorf("ses: send (transient): %w", err)
}

func apiMessage(code, msg string) string {
	if msg == "" {
		return "SES " + code
	}
	return "SES " + code + ": " + msg
}

// Account is what GetAccount says of the SES account that matters to a
// sender: its quota, and whether it may send to anyone at all.
type Account struct {
	MaxSendRate   float64 // recipients a second
	Max24HourSend float64 // recipients in 24 hours
	// Sandbox: only verified addresses receive mail, within the sandbox's
	// small quota, until AWS grants production access.
	Sandbox bool
	// SendingPaused: every send fails with SendingPausedException until
	// sending is resumed (by AWS after a review, or by the account owner).
	SendingPaused bool
	// Enforcement is AWS's view of the account's reputation: HEALTHY,
	// PROBATION or SHUTDOWN.
	Enforcement string
}

// Account reads the SES account's quota and status (GetAccount).
func (p *Provider) Account(ctx context.Context) (Account, error) {
	out, err := p.ses.GetAccount(ctx, &sesv2.GetAccountInput{})
	if err != nil {
		return Account{}, fmt.Errorf("ses: get account: %w", err)
	}
	if out.SendQuota == nil {
		return Account{}, errors.New("ses: get account: no send quota")
	}
	return Account{
		MaxSendRate:   out.SendQuota.MaxSendRate,
		Max24HourSend: out.SendQuota.Max24HourSend,
		Sandbox:       !out.ProductionAccessEnabled,
		SendingPaused: !out.SendingEnabled,
		Enforcement:   aws.ToString(out.EnforcementStatus),
	}, nil
}
