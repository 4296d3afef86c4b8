package processmanagers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/logs"
	"github.com/mailroom/mailroom/internal/mailmsg"
	"github.com/mailroom/mailroom/internal/outcomes"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/scan"
	"github.com/mailroom/mailroom/projections"
)

// Pipeline takes queued emails through the content gateway to the
// provider. Every step is recorded on the email's stream, and each step is
// skipped when the stream shows it done, so a redelivered event resumes
// where the last attempt stopped.
type Pipeline struct {
	Commands *commands.Service
	// Content holds the email's bodies and attachments, sealed with its
	// data key.
	Content *datakeys.Blobs
	Scanner *scan.Scanner
	Egress  egress.Policy
	Sender  provider.Sender
	// Checks reads, at once, what the read models say of an email and of
	// its account, domain and recipients.
	Checks func(ctx context.Context, emailID, accountID, domainID, domainName string, addresses []string) (Checks, error)
	// SigningKey returns the domain's active DKIM key (nil for legacy).
	SigningKey func(ctx context.Context, accountID, domainName string) (*provider.DKIMKey, error)
	// Settle waits until the read models the checks use include pos.
	Settle commands.Settle
	// Pace, when set, waits until the provider's send rate allows one
	// more message to recipients recipients (the shared rate limit,
	// counted in recipients as SES counts it).
	Pace    func(ctx context.Context, recipients int) error
	MaxAge  time.Duration // transient failures, the provider's and others, are retried this long
	Prepare time.Duration // preparation deadline; zero means PrepareDeadline
	Now     func() time.Time
	// Downloads fetches attachments given by path: one client of Egress
	// kept for the process, so that connections are reused and none is
	// left behind.
	Downloads *http.Client
	// Feedback, when set, gives the provider's feedback at the moment of
	// sending (the sandbox's simulator); it is recorded with EmailSent.
	Feedback func(st email.State, at time.Time) []domain.Event
	Outcomes *outcomes.Recorder // may be nil
	// Log receives what failure details keep from customers: provider
	// answers, rendering and download errors.
	Log *slog.Logger
}

// acceptedSend is what recording a message the provider accepted needs.
type acceptedSend struct {
	msgID string
	at    time.Time // when the provider accepted it
	atts  []email.Attachment
}

// Checks is what the read models say of an email before it leaves.
type Checks struct {
	Suspended  bool     // the account is suspended: the email waits
	CanSend    bool     // the domain is still the account's, and verified
	Suppressed []string // the recipients the account suppresses, lower case
	// Unlisted: the emails read model has no row for the email. An
	// erasure is answered once the row is gone, so the stream is read
	// again to tell an erasure from a read model behind.
	Unlisted bool
}

// PrepareDeadline bounds an email's preparation (downloads, scanning,
// rendering): an email whose attachments have not arrived by then fails,
// instead of holding a worker.
const PrepareDeadline = 2 * time.Minute

// pipelineMeta is the pipeline's actor; each email's work adds its cause.
var pipelineMeta = commands.Meta{Actor: "system:email-pipeline"}

// Process takes the email id on from where its stream shows it: the work
// of an EmailQueued, or of an EmailReleased as if the email had just been
// queued, recorded at pos. Returning an error means try again (Transient
// marks the ones expected to pass, such as a provider outage).
func (p *Pipeline) Process(ctx context.Context, id string, pos eventstore.Position) error {
	st, ver, err := p.Commands.EmailAt(ctx, id)
	if err != nil {
		return Transient(err)
	}
	return p.process(ctx, st, ver, pos, nil, pipelineMeta)
}

// process works the email from st, read at version ver, which lets the
// outcome be appended without reading the stream again; meta names the
// event that asked for the work.
func (p *Pipeline) process(ctx context.Context, st email.State, ver eventstore.ExpectedVersion, pos eventstore.Position, room *Lease, meta commands.Meta) error {
	if !st.Exists() || st.Sent != nil || st.Failed != nil || st.Held || st.Erased != nil || st.Queued.Erased {
		return nil // done already, waiting for its release, or erased
	}
	// An email that does not leave stops before the work that costs
	// others: downloads, and a turn of the provider's shared rate. The
	// check that counts is the one right before the provider call; this
	// one is made only when there is such work to save, and goes by what
	// the read models show without waiting for them.
	if p.Pace != nil || (st.Scanned == nil && hasDownloads(st.Queued)) {
		if stop, err := p.mayNotLeave(ctx, st, pos, false, meta); stop || err != nil {
			return err
		}
	}
	atts := st.Attachments()
	if st.Scanned == nil {
		var reason, detail string
		var err error
		reason, detail, atts, err = p.prepare(ctx, st, room, meta)
		if errors.Is(err, datakeys.ErrErased) {
			return nil // erased meanwhile: nothing happens to it any more
		}
		if err != nil {
			return p.retryOrExpire(ctx, st, meta, err)
		}
		if reason != "" {
			return p.fail(ctx, meta, st.Queued.EmailID, reason, detail)
		}
	}
	left, err := p.send(ctx, st, ver, pos, atts, meta)
	if !left && st.Scanned == nil {
		// What this try downloaded is the email's once an event names it,
		// which happens when it leaves: an email that fails, waits or
		// tries again keeps none of it (a retry downloads it again).
		p.dropDownloads(ctx, st, atts)
	}
	if errors.Is(err, datakeys.ErrErased) {
		return nil // erased meanwhile: nothing happens to it any more
	}
	return err
}

// hasDownloads reports whether the email has attachments to download.
func hasDownloads(q *email.Queued) bool {
	return slices.ContainsFunc(q.Attachments, func(a email.Attachment) bool { return a.Path != "" })
}

// dropDownloads deletes what the gateway downloaded for the email: its
// attachments given by path.
func (p *Pipeline) dropDownloads(ctx context.Context, st email.State, atts []email.Attachment) {
	var downloaded []blob.Digest
	for i, a := range atts {
		if i < len(st.Queued.Attachments) && st.Queued.Attachments[i].Path != "" && a.Digest != "" {
			downloaded = append(downloaded, blob.Digest(a.Digest))
		}
	}
	if len(downloaded) > 0 {
		_ = p.Content.Delete(context.WithoutCancel(ctx), downloaded...)
	}
}

func (p *Pipeline) fail(ctx context.Context, meta commands.Meta, id, reason, detail string) error {
	if err := p.Commands.FailEmail(ctx, id, reason, detail, meta); err != nil {
		return Transient(err)
	}
	p.Outcomes.Fail(reason)
	return nil
}

// retryOrExpire answers an error that may pass (a store, the read models,
// the content scanner or a signing key failing for now; stored content
// not found, which an erasure under way also gives): the email is
// tried again until it has been going for MaxAge, counted as for the
// provider's errors, and then fails, so that no email stays queued for
// ever, whatever keeps failing. A try cut off by a shutdown is not
// counted against the email.
func (p *Pipeline) retryOrExpire(ctx context.Context, st email.State, meta commands.Meta, err error) error {
	if ctx.Err() != nil || errors.Is(err, datakeys.ErrErased) || p.Now().Sub(st.GoingSince) <= p.MaxAge {
		return Transient(err)
	}
	p.logFailure(meta, st.Queued.EmailID, "email could not be sent in time", err)
	return p.fail(ctx, meta, st.Queued.EmailID, email.ReasonInternalError, fmt.Sprintf("the email could not be sent within %s", p.MaxAge))
}

// prepare runs the gateway within the preparation deadline: an email that
// cannot be prepared in time fails rather than holding a worker for good.
func (p *Pipeline) prepare(ctx context.Context, st email.State, room *Lease, meta commands.Meta) (reason, detail string, atts []email.Attachment, err error) {
	limit := cmp.Or(p.Prepare, PrepareDeadline)
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	reason, detail, atts, err = p.gateway(pctx, st, room, meta)
	if err != nil && pctx.Err() != nil && ctx.Err() == nil {
		p.logFailure(meta, st.Queued.EmailID, "preparation deadline passed", err)
		return email.ReasonAttachmentDownload, fmt.Sprintf("the attachments could not be fetched and scanned within %s", limit), nil, nil
	}
	return reason, detail, atts, err
}

// gateway runs what an email's content must pass before it leaves:
// attachments download, and nothing is blocked by the content scanner. A
// non-empty reason fails the email; an error means try again. Each
// download's room beyond its length goes back as soon as the length is
// known.
func (p *Pipeline) gateway(ctx context.Context, st email.State, room *Lease, meta commands.Meta) (reason, detail string, atts []email.Attachment, err error) {
	q := st.Queued
	// What this pass downloads belongs to the email only once the pass
	// succeeds: an email that fails keeps none of it, and a retry
	// downloads it again, so nothing is left that no event names.
	var downloaded []blob.Digest
	defer func() {
		if reason != "" || err != nil {
			_ = p.Content.Delete(context.WithoutCancel(ctx), downloaded...)
		}
	}()
	for _, d := range []string{q.HTMLDigest, q.TextDigest} {
		if d == "" {
			continue
		}
		body, err := p.Content.Get(ctx, q.EmailID, blob.Digest(d))
		if err != nil {
			return "", "", nil, err
		}
		v, err := p.Scanner.ScanBody(ctx, body)
		if errors.Is(err, scan.ErrTooLarge) {
			return email.ReasonMalware, "the message body is larger than the content scanner accepts", nil, nil
		}
		if err != nil {
			return "", "", nil, err
		}
		if v.Blocked {
			return email.ReasonMalware, v.Reason, nil, nil
		}
	}
	// Downloads share the message's attachment budget with the inline
	// attachments: each may take what is left, and is read one at a time.
	// The room the email holds follows what is known of its size.
	known, budget, toCome := attachmentsKnown(q.Attachments)
	for i, a := range q.Attachments {
		if scan.BlockedExtension(a.Filename) {
			return email.ReasonBlockedAttachment, fmt.Sprintf("attachment %q: type not allowed", a.Filename), nil, nil
		}
		var content []byte
		if a.Path != "" {
			tooLarge := fmt.Sprintf("attachment %d (%s) takes the attachments past the %d MB limit", i, a.Filename, commands.MaxAttachmentBytes/1_000_000)
			maxBytes := budget / 4 * 3 // the most bytes whose base64 fits
			if maxBytes <= 0 {
				return email.ReasonAttachmentsTooLarge, tooLarge, nil, nil
			}
			raw, err := p.Commands.AttachmentURL(q.EmailID, a)
			if err != nil {
				return "", "", nil, err
			}
			dl, err := p.Egress.Fetch(ctx, p.Downloads, raw, maxBytes, func(n int64) {
				room.ShrinkTo(attachmentBound(known+n, budget-email.Base64Size(n), toCome-1))
			})
			var tle *egress.TooLargeError
			if errors.As(err, &tle) {
				return email.ReasonAttachmentsTooLarge, tooLarge, nil, nil
			}
			if err != nil {
				p.logFailure(meta, q.EmailID, "attachment download failed", err, "attachment", i)
				return email.ReasonAttachmentDownload, fmt.Sprintf("attachment %d (%s): %s", i, a.Filename, egress.Describe(err)), nil, nil
			}
			content = dl.Body
			budget -= email.Base64Size(int64(len(content)))
			known, toCome = known+int64(len(content)), toCome-1
			room.ShrinkTo(attachmentBound(known, budget, toCome))
			// The server's type is taken only where the request gave
			// none, and only if the request could have given it: it is
			// the server's say, not the customer's.
			if a.ContentType == "" || a.ContentType == "application/octet-stream" {
				if dl.ContentType != "" && commands.ContentTypeProblem(dl.ContentType) == "" {
					a.ContentType = dl.ContentType
				}
			}
			d, err := p.Content.Put(ctx, q.EmailID, q.AccountID, content)
			if err != nil {
				return "", "", nil, err
			}
			downloaded = append(downloaded, d[0])
			a.Digest, a.SizeBytes = string(d[0]), int64(len(content))
		} else if content, err = p.Content.Get(ctx, q.EmailID, blob.Digest(a.Digest)); err != nil {
			return "", "", nil, err
		}
		v, err := p.Scanner.ScanAttachment(ctx, a.Filename, content)
		if errors.Is(err, scan.ErrTooLarge) {
			return email.ReasonAttachmentsTooLarge, fmt.Sprintf("attachment %q is larger than the content scanner accepts", a.Filename), nil, nil
		}
		if err != nil {
			return "", "", nil, err
		}
		if v.Blocked {
			r := email.ReasonMalware
			if scan.BlockedExtension(a.Filename) {
				r = email.ReasonBlockedAttachment
			}
			return r, fmt.Sprintf("attachment %q: %s", a.Filename, v.Reason), nil, nil
		}
		atts = append(atts, a)
	}
	return "", "", atts, nil
}

// send renders the message, checks that it may leave, hands it to the
// provider and records the outcome; pos is where the work was asked for.
// left says the provider accepted the message.
func (p *Pipeline) send(ctx context.Context, st email.State, ver eventstore.ExpectedVersion, pos eventstore.Position, atts []email.Attachment, meta commands.Meta) (left bool, err error) {
	q := st.Queued
	raw, err := p.render(ctx, st, atts)
	if IsTransient(err) {
		return false, p.retryOrExpire(ctx, st, meta, err)
	}
	if err != nil { // the message cannot be rendered: it never leaves
		p.logFailure(meta, q.EmailID, "rendering failed", err)
		return false, p.fail(ctx, meta, q.EmailID, email.ReasonRenderingFailed, "the message could not be built from the email's fields")
	}
	recipients := mailmsg.Addresses(st.Recipients())
	if p.Pace != nil {
		if err := p.Pace(ctx, len(recipients)); err != nil {
			return false, p.retryOrExpire(ctx, st, meta, err)
		}
	}
	// The checks come last, right before the provider call, whatever the
	// preparation and the rate limit took: a suspension, a domain's
	// removal, a suppression or an erasure answered meanwhile holds for
	// the email.
	if stop, err := p.mayNotLeave(ctx, st, pos, true, meta); stop || err != nil {
		return false, err
	}
	// The key after the checks: a removed domain has none, and fails as
	// removed rather than waiting for its key.
	var key *provider.DKIMKey
	if p.SigningKey != nil {
		if key, err = p.SigningKey(ctx, q.AccountID, domainOf(q.FromEmail)); err != nil {
			return false, p.retryOrExpire(ctx, st, meta, err)
		}
	}
	offered := time.Now()
	msgID, err := p.Sender.Send(ctx, provider.Outbound{EmailID: q.EmailID, From: mailmsg.WireAddress(q.FromEmail), Recipients: recipients, Raw: raw, Tags: q.Tags, DKIM: key})
	p.Outcomes.ProviderAnswered(time.Since(offered), err)
	accepted := p.Now()
	// Retries are counted from when the email last set off: the time an
	// email is held while its account is suspended is not retrying.
	tooOld := accepted.Sub(st.GoingSince) > p.MaxAge
	var rejected *provider.RejectedError
	// Provider answers may name relay hosts, addresses or provider
	// accounts: the customer's timeline gets their codes, the log the rest.
	switch {
	case provider.IsThrottled(err) && tooOld:
		// An answer to slow down that lasts this long is no longer about
		// the pace (a full mailbox answers 452 for days): the email
		// fails as on any transient error, so none waits for ever.
		p.Outcomes.GaveUp(err, p.Now())
		p.logFailure(meta, q.EmailID, "provider kept throttling the message", err)
		return false, p.fail(ctx, meta, q.EmailID, email.ReasonProviderUnavailable,
			fmt.Sprintf("the provider did not accept the message within %s", p.MaxAge))
	case provider.IsThrottled(err):
		// Slowing down is not failing: it does not count towards the
		// provider being unavailable.
		p.Outcomes.Send("throttled", nil, p.Now())
		return false, err
	case errors.As(err, &rejected):
		p.Outcomes.Send("failed", err, p.Now())
		p.logFailure(meta, q.EmailID, "provider rejected the message", err)
		detail := "the provider rejected the message"
		if rejected.Code != "" {
			detail += " (" + rejected.Code + ")"
		}
		return false, p.fail(ctx, meta, q.EmailID, email.ReasonProviderRejected, detail)
	case err != nil && tooOld:
		p.Outcomes.GaveUp(err, p.Now()) // the provider is no less down
		p.logFailure(meta, q.EmailID, "provider unavailable", err)
		return false, p.fail(ctx, meta, q.EmailID, email.ReasonProviderUnavailable,
			fmt.Sprintf("the provider did not accept the message within %s", p.MaxAge))
	case err != nil:
		p.Outcomes.Send("retrying", err, p.Now())
		return false, Transient(&providerTrouble{err})
	}
	p.Outcomes.Send("sent", nil, accepted)
	return true, p.recordSent(ctx, st, ver, acceptedSend{msgID: msgID, at: accepted, atts: atts}, meta)
}

// providerTrouble marks a failure of the provider itself for now (down,
// silent, refusing), which every email waiting for it meets alike.
type providerTrouble struct{ err error }

func (e *providerTrouble) Error() string { return e.err.Error() }
func (e *providerTrouble) Unwrap() error { return e.err }

// mayNotLeave reads what the read models say of the email now, in one
// statement after one wait: stop says it does not leave. A suspended
// account's email is held (a reinstatement releases it); one whose domain
// was removed or is no longer verified, or with a suppressed recipient,
// fails. With settle, it first gives the read models a while to show
// what was recorded up to pos.
func (p *Pipeline) mayNotLeave(ctx context.Context, st email.State, pos eventstore.Position, settle bool, meta commands.Meta) (stop bool, err error) {
	q := st.Queued
	// Late read models do not hold the email up: the checks go by what
	// they show.
	if settle {
		_ = p.Settle(ctx, pos, projections.AccountsName, projections.DomainsName, projections.EmailsName)
	}
	checks, err := p.Checks(ctx, q.EmailID, q.AccountID, q.DomainID, domainOf(q.FromEmail), mailmsg.Addresses(st.Recipients()))
	if err != nil {
		return true, p.retryOrExpire(ctx, st, meta, err)
	}
	if checks.Unlisted && settle {
		// An erased email does not leave: its message may have been
		// rendered before the erasure, which deleted what it was made of.
		// (Unsettled, the row may just not be there yet: the check that
		// counts is the settled one, right before the provider call.)
		latest, _, err := p.Commands.EmailAt(ctx, q.EmailID)
		if err != nil {
			return true, p.retryOrExpire(ctx, st, meta, err)
		}
		if latest.Erased != nil || latest.Queued == nil || latest.Queued.Erased {
			return true, nil
		}
	}
	if !checks.Suspended && checks.CanSend && len(checks.Suppressed) == 0 {
		return false, nil
	}
	switch {
	case checks.Suspended:
		// The email waits, without holding up other emails.
		return true, Transient(p.Commands.HoldEmail(ctx, q.EmailID, meta))
	case !checks.CanSend:
		return true, p.fail(ctx, meta, q.EmailID, email.ReasonDomainRemoved, "the sending domain was removed")
	default:
		return true, p.fail(ctx, meta, q.EmailID, email.ReasonSuppressed, "suppressed recipients: "+strings.Join(checks.Suppressed, ", "))
	}
}

// recordSent records that the provider accepted the email. The message
// has left: while the database refuses the write it is tried again here,
// and if the send job must end first, the provider's answer is kept with
// the job (keepAccepted), so that its next try, in whichever process,
// records it rather than sends again.
func (p *Pipeline) recordSent(ctx context.Context, st email.State, ver eventstore.ExpectedVersion, sent acceptedSend, meta commands.Meta) error {
	wait := jobs.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	acceptance := commands.Acceptance{MessageID: sent.msgID, At: sent.at, Attachments: sent.atts, Feedback: p.Feedback}
	for try := 1; ; try++ {
		err := p.Commands.RecordEmailSentAt(ctx, st, ver, acceptance, meta)
		if err == nil || errors.Is(err, datakeys.ErrErased) {
			return err
		}
		if try == 1 {
			p.logFailure(meta, st.Queued.EmailID, "provider accepted the message but it could not be recorded; recording it again", err)
		}
		select {
		case <-ctx.Done():
			keepAccepted(ctx, st, sent)
			return Transient(err)
		case <-time.After(wait.Delay(try)):
		}
	}
}

// logFailure records for operators the error behind a failure detail,
// with the request the email came from. Error texts of relays, providers
// and downloads may name recipients or files, which the log would keep
// after an erasure: they are logged redacted.
func (p *Pipeline) logFailure(meta commands.Meta, emailID, msg string, err error, attrs ...any) {
	if p.Log != nil {
		p.Log.Warn(msg, append([]any{"email_id", emailID, "request_id", meta.RequestID, "err", logs.Redacted(err)}, attrs...)...)
	}
}

// render builds the MIME message every provider sends. Tags are not
// headers: recipients would see them; SES takes them beside the message.
func (p *Pipeline) render(ctx context.Context, st email.State, atts []email.Attachment) ([]byte, error) {
	q := st.Queued
	from, err := mailmsg.ParseAddress(q.From)
	if err != nil {
		return nil, err
	}
	m := mailmsg.Message{
		From: from, Subject: q.Subject, Date: p.Now(),
		MessageID: q.EmailID + "@" + domainOf(q.FromEmail),
		Headers:   []mailmsg.Header{{Name: "X-Mailroom-Email-Id", Value: q.EmailID}},
	}
	for _, list := range []struct {
		dst *[]mailmsg.Address
		src []string
	}{{&m.To, q.To}, {&m.Cc, q.Cc}, {&m.Bcc, q.Bcc}, {&m.ReplyTo, q.ReplyTo}} {
		for _, s := range list.src {
			a, err := mailmsg.ParseAddress(s)
			if err != nil {
				return nil, err
			}
			*list.dst = append(*list.dst, a)
		}
	}
	get := func(d string) (string, error) {
		if d == "" {
			return "", nil
		}
		b, err := p.Content.Get(ctx, q.EmailID, blob.Digest(d))
		return string(b), err
	}
	if m.HTML, err = get(q.HTMLDigest); err != nil {
		return nil, Transient(err)
	}
	if m.Text, err = get(q.TextDigest); err != nil {
		return nil, Transient(err)
	}
	for _, a := range atts {
		b, err := p.Content.Get(ctx, q.EmailID, blob.Digest(a.Digest))
		if err != nil {
			return nil, Transient(err)
		}
		m.Attachments = append(m.Attachments, mailmsg.Attachment{Filename: a.Filename, ContentType: a.ContentType, ContentID: a.ContentID, Content: b})
	}
	return mailmsg.Build(m)
}

func domainOf(addr string) string {
	_, d, _ := strings.Cut(mailmsg.WireAddress(addr), "@")
	return strings.ToLower(d)
}
