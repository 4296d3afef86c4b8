package commands

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/mailmsg"
	"github.com/mailroom/mailroom/projections"
)

// Limits of a send: everything a request can put into an event is bounded.
// README.md lists them with the other limits of the API.
const (
	MaxRecipients      = 50         // to, cc and bcc together
	MaxReplyTo         = 50         // reply_to addresses
	MaxAttachments     = 20         // attachments of one email
	MaxAttachmentBytes = 40_000_000 // 40 MB (not MiB) of base64 over all attachments, downloaded ones included
	MaxSubjectLength   = 998        // characters (RFC 5322 line length)
	MaxTags            = 49         // SES's limit of 50 message tags, less the one that carries the email id
	MaxTagLength       = 256        // characters of a tag name or value (SES)
	MaxFilenameLength  = 255        // characters of an attachment filename
	MaxContentType     = 255        // bytes of an attachment content_type (RFC 6838)
	MaxContentID       = 255        // bytes of an attachment content_id
	MaxIdempotencyKey  = 256        // bytes of an Idempotency-Key
	IdempotencyWindow  = 24 * time.Hour
)

// IdempotencyKeyField names the Idempotency-Key header in validation errors.
const IdempotencyKeyField = "Idempotency-Key"

// SendEmail is a send request as the API receives it.
type SendEmail struct {
	From        string            `json:"from"`
	To          []string          `json:"to"`
	Cc          []string          `json:"cc,omitempty"`
	Bcc         []string          `json:"bcc,omitempty"`
	ReplyTo     []string          `json:"reply_to,omitempty"`
	Subject     string            `json:"subject"`
	HTML        string            `json:"html,omitempty"`
	Text        string            `json:"text,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Attachments []SendAttachment  `json:"attachments,omitempty"`
}

// SendAttachment is one attachment of a send request.
type SendAttachment struct {
	Filename    string `json:"filename,omitempty"`
	Content     string `json:"content,omitempty"`
	Path        string `json:"path,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	ContentID   string `json:"content_id,omitempty"`
}

// Accepted is the 202 answer to a send.
type Accepted struct {
	ID          string
	CreatedAt   time.Time
	Recipients  int
	Attachments int
}

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,` + strconv.Itoa(MaxTagLength) + `}$`)

// SendEmail validates and queues an email. idempotencyKey, when not empty,
// makes a repeat of the same request within the key's 24-hour window
// return the first answer, and a different request under the same key a
// conflict; body is the request as received, whose fingerprint tells the
// two apart.
//
// It runs in four steps: the request is validated; under an idempotency
// key, a repeat is answered from the email's stream before anything else
// (a check that could change since, such as the sender's domain, never
// turns a repeat of an accepted send into a refusal, and a repeat stores
// nothing); the sender's domain and attachment URLs are checked; its
// content is staged in blob storage (the event carries digests) and the
// email is queued by one append.
func (s *Service) SendEmail(ctx context.Context, accountID string, req SendEmail, idempotencyKey string, body []byte, meta Meta) (Accepted, error) {
	decoded, err := validateRequest(req, idempotencyKey)
	if err != nil {
		return Accepted{}, s.withPathRefusals(ctx, req, err)
	}
	now := s.now()
	id, hash := uuid.Must(uuid.NewV7()).String(), ""
	if idempotencyKey != "" {
		// Only a repeat under the key is told apart by the fingerprint:
		// a send without one is never repeated.
		hash = requestHash(body)
		if id, err = s.idempotentID(ctx, accountID, idempotencyKey, now); err != nil {
			return Accepted{}, err
		}
		if a, repeated, err := s.repeat(ctx, id, hash); err != nil || repeated {
			return a, err
		}
	}
	checked, err := s.checkSend(ctx, accountID, req, decoded)
	if err != nil {
		return Accepted{}, err
	}
	q, err := s.stage(ctx, req, checked, email.Queued{
		EmailID: id, AccountID: accountID, DomainID: checked.domainID, From: strings.TrimSpace(req.From),
		FromEmail: checked.from, To: req.To, Cc: req.Cc, Bcc: req.Bcc, ReplyTo: req.ReplyTo, Subject: req.Subject,
		Tags: req.Tags, RequestHash: hash, QueuedAt: now,
		RecipientKeys: s.address.OfRecipients(accountID, slices.Concat(req.To, req.Cc, req.Bcc)),
	})
	if errors.Is(err, datakeys.ErrErased) {
		return Accepted{}, errKeyErased
	}
	if err != nil {
		return Accepted{}, err // stage stored all of its content or none
	}
	if err := ctx.Err(); err != nil {
		// The client went away while its content was stored: nothing
		// is queued, for sure, so what was staged belongs to no email.
		s.discard(ctx, q)
		return Accepted{}, err
	}
	a, stored, err := s.queue(ctx, q, meta)
	if !stored || errors.Is(err, eventstore.ErrTooLarge) {
		// A concurrent first request under the same key was recorded
		// instead, or the store refused the record outright: what this one
		// staged belongs to no email. Any other failure to queue may have
		// recorded the email all the same (an answer lost), so its
		// content stays.
		s.discard(ctx, q)
	}
	return a, err
}

// discard deletes what q's content was staged in, for a send that queued
// nothing, even when its request was cancelled. Should the delete fail,
// the blobs stay, sealed under q's email's key.
func (s *Service) discard(ctx context.Context, q email.Queued) {
	_ = s.content.Delete(context.WithoutCancel(ctx), contentOf(q)...)
}

// checkedSend is what checking a send request found out.
type checkedSend struct {
	from     string   // the sender's address
	domainID string   // the verified domain it sends from
	decoded  [][]byte // each inline attachment's bytes (nil for a path)
}

// validateRequest validates a request's fields and idempotency key, and
// decodes its inline attachments.
func validateRequest(req SendEmail, idempotencyKey string) ([][]byte, error) {
	v, decoded := validateSend(req)
	if len(idempotencyKey) > MaxIdempotencyKey {
		v.Add(IdempotencyKeyField, "must be at most %d bytes; got %d", MaxIdempotencyKey, len(idempotencyKey))
	} else {
		v.CheckLine(IdempotencyKeyField, idempotencyKey)
	}
	return decoded, v.OrNil()
}

// withPathRefusals adds to a validation error the refusals of the
// attachment URLs its fields did not already refuse, so that a request
// wrong in several fields hears of all of them at once rather than of its
// paths only after the rest is fixed. A lookup that got no answer adds
// nothing: the validation answer stands.
func (s *Service) withPathRefusals(ctx context.Context, req SendEmail, err error) error {
	var v *domain.ValidationError
	if !errors.As(err, &v) {
		return err
	}
	named := map[string]bool{}
	for _, f := range v.Errors {
		named[f.Field] = true
	}
	if named["attachments"] {
		return err // over the count or the size: the paths are beside the point
	}
	var fields, urls []string
	for i, a := range req.Attachments {
		f := fmt.Sprintf("attachments.%d.path", i)
		if a.Path != "" && !named[f] && !named[fmt.Sprintf("attachments.%d.content", i)] {
			fields, urls = append(fields, f), append(urls, a.Path)
		}
	}
	var paths domain.ValidationError
	if s.checkURLFields(ctx, &paths, fields, urls) != nil {
		return err
	}
	v.Errors = append(v.Errors, paths.Errors...)
	return v
}

// checkSend checks what a valid request depends on outside itself: the
// attachments' URLs (checked now so a private or plain-http URL is a 422,
// and again when fetched) and the sender's domain.
func (s *Service) checkSend(ctx context.Context, accountID string, req SendEmail, decoded [][]byte) (checkedSend, error) {
	var paths domain.ValidationError
	var fields, urls []string
	for i, a := range req.Attachments {
		if a.Path != "" {
			fields, urls = append(fields, fmt.Sprintf("attachments.%d.path", i)), append(urls, a.Path)
		}
	}
	if err := s.checkURLFields(ctx, &paths, fields, urls); err != nil {
		return checkedSend{}, err
	}
	if err := paths.OrNil(); err != nil {
		return checkedSend{}, err
	}

	from, _ := mailmsg.ParseAddress(req.From)
	_, fromDomain, _ := strings.Cut(from.Email, "@")
	// Domains are kept as NormalizeName writes them (punycode for
	// internationalised names); a name it refuses matches no domain.
	name, problem := sendingdomain.NormalizeName(fromDomain)
	if problem != "" {
		name = strings.ToLower(fromDomain)
	}
	domainID, err := s.sendableDomain(ctx, accountID, name)
	if errors.Is(err, domain.ErrNotFound) {
		return checkedSend{}, &domain.ForbiddenError{Code: "domain_not_verified",
			Detail: fmt.Sprintf("%s is not a verified domain of this account", strings.ToLower(fromDomain))}
	}
	if err != nil {
		return checkedSend{}, err
	}
	return checkedSend{from: from.Email, domainID: domainID, decoded: decoded}, nil
}

// stage puts the request's bodies and inline attachments in blob storage,
// sealed for the email, and completes q with their digests and the
// attachments' descriptions.
func (s *Service) stage(ctx context.Context, req SendEmail, checked checkedSend, q email.Queued) (email.Queued, error) {
	// Every part goes to storage at once; each digest lands where the
	// part's description wants it.
	var parts [][]byte
	var digests []*string
	put := func(b []byte, digest *string) {
		parts = append(parts, b)
		digests = append(digests, digest)
	}
	if req.HTML != "" {
		put([]byte(req.HTML), &q.HTMLDigest)
	}
	if req.Text != "" {
		put([]byte(req.Text), &q.TextDigest)
	}
	q.Attachments = make([]email.Attachment, len(req.Attachments))
	for i, a := range req.Attachments {
		att := &q.Attachments[i]
		*att = email.Attachment{Filename: a.Filename, ContentType: a.ContentType, ContentID: storedContentID(a.ContentID)}
		if a.Path != "" {
			// A presigned URL is a credential: only the pipeline reads it.
			att.Path, att.SealedPath = egress.Redact(a.Path), s.box.Seal([]byte(a.Path), PathContext(q.EmailID))
		}
		if att.Filename == "" {
			att.Filename = filenameOf(a.Path)
		}
		if att.ContentType == "" {
			att.ContentType = mailmsg.ContentTypeFor(att.Filename)
		}
		if a.Path == "" {
			att.SizeBytes = int64(len(checked.decoded[i]))
			put(checked.decoded[i], &att.Digest)
		}
	}
	if len(q.Attachments) == 0 {
		q.Attachments = nil
	}
	stored, err := s.content.Put(ctx, q.EmailID, q.AccountID, parts...)
	if err != nil {
		return q, err
	}
	for i, d := range stored {
		*digests[i] = string(d)
	}
	return q, nil
}

// errKeyErased answers a repeat under an idempotency key whose email has
// been erased since: there is nothing left to answer with.
var errKeyErased = &domain.ConflictError{Code: "email_erased",
	Detail: "the email this Idempotency-Key was used for has been erased; send with a new key"}

// repeat answers a send under an idempotency key whose email, id, is
// already recorded: the first answer for the same request, a conflict for
// another. repeated is false when id has no email yet.
func (s *Service) repeat(ctx context.Context, id, hash string) (a Accepted, repeated bool, err error) {
	st, _, _, last, err := loadSpan(ctx, s, email.Stream(id), email.Evolve)
	if err != nil || !st.Exists() {
		return Accepted{}, false, err
	}
	first, err := firstAnswer(st, hash)
	if err != nil {
		return Accepted{}, true, err
	}
	_ = s.settle(ctx, last, projections.EmailsName) // the retry sees what the first request did
	return acceptedOf(first), true, nil
}

// firstAnswer is what a repeat of the request with hash is answered with,
// given its email's state.
func firstAnswer(st email.State, hash string) (email.Queued, error) {
	if st.Erased != nil || st.Queued.Erased {
		return email.Queued{}, errKeyErased
	}
	if st.Queued.RequestHash != hash {
		return email.Queued{}, &domain.ConflictError{Code: "idempotency_key_reused",
			Detail: "this Idempotency-Key was used with a different request in the last 24 hours"}
	}
	return *st.Queued, nil
}

// queue appends q to its email's stream, which is new: its id was just
// made, or no email held it when repeat looked. Should a concurrent
// request under the same idempotency key have recorded one since, the
// stream is read and this one answers as a repeat. stored says q was
// recorded, or may have been: it is false only when the stream held
// another request's email.
func (s *Service) queue(ctx context.Context, q email.Queued, meta Meta) (a Accepted, stored bool, err error) {
	accepted, stored := q, true
	decide := func(st email.State) ([]domain.Event, error) {
		if st.Exists() {
			stored = false
			first, err := firstAnswer(st, q.RequestHash)
			accepted = first
			return nil, err
		}
		return email.Queue(st, q)
	}
	if _, err := executeNew(ctx, s, email.Stream(q.EmailID), email.Evolve, decide, meta, projections.EmailsName); err != nil {
		return Accepted{}, stored, err
	}
	return acceptedOf(accepted), stored, nil
}

// contentOf lists the blobs q's content was staged in.
func contentOf(q email.Queued) []blob.Digest {
	var out []blob.Digest
	for _, d := range []string{q.HTMLDigest, q.TextDigest} {
		if d != "" {
			out = append(out, blob.Digest(d))
		}
	}
	for _, a := range q.Attachments {
		if a.Digest != "" {
			out = append(out, blob.Digest(a.Digest))
		}
	}
	return out
}

func acceptedOf(q email.Queued) Accepted {
	return Accepted{
		ID: q.EmailID, CreatedAt: q.QueuedAt,
		Recipients:  len(q.To) + len(q.Cc) + len(q.Bcc),
		Attachments: len(q.Attachments),
	}
}

// idempotencyNamespace derives email ids from idempotency keys, so that
// concurrent repeats collide on one stream.
var idempotencyNamespace = uuid.MustParse("6f1c2a52-8d0e-4f4e-9d7c-1b2b9e6f3a10")

// windowID is the email id of a key's window n. Window 0 keeps the id keys
// had before windows, so emails sent then are still found. A key holds no
// NUL (it is one line of text), so no two (key, n) share an id.
func windowID(accountID, key string, n int) string {
	name := accountID + "\x00" + key
	if n > 0 {
		name += "\x00" + strconv.Itoa(n)
	}
	return uuid.NewSHA1(idempotencyNamespace, []byte(name)).String()
}

// idempotentID is the email id a key answers with at now. Each 24-hour
// window of a key has its own id, so repeats inside any window, the first
// or a later one, meet on one stream. Window n+1 is opened only once window
// n's email is over 24 hours old: the windows that exist are 0..N-1, and N
// is found with O(log N) stream reads (doubling, then halving). The last
// window answers while it is under 24 hours old; after that, window N.
func (s *Service) idempotentID(ctx context.Context, accountID, key string, now time.Time) (string, error) {
	opened := func(n int) (time.Time, bool, error) {
		evs, err := s.store.ReadStream(ctx, email.Stream(windowID(accountID, key, n)), 0, 1)
		if errors.Is(err, eventstore.ErrStreamNotFound) || (err == nil && len(evs) == 0) {
			return time.Time{}, false, nil
		}
		if err != nil {
			return time.Time{}, false, err
		}
		e, err := codec.Decode(evs[0])
		if err != nil {
			return time.Time{}, false, err
		}
		q, ok := e.(*email.Queued)
		if !ok {
			return time.Time{}, false, fmt.Errorf("stream %s does not start with %s", evs[0].StreamID, (&email.Queued{}).EventType())
		}
		return q.QueuedAt, true, nil
	}
	lastAt, ok, err := opened(0)
	if err != nil || !ok {
		return windowID(accountID, key, 0), err
	}
	// lo exists, hi does not.
	lo, hi := 0, 1
	for {
		at, ok, err := opened(hi)
		if err != nil {
			return "", err
		}
		if !ok {
			break
		}
		lo, lastAt, hi = hi, at, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		at, ok, err := opened(mid)
		if err != nil {
			return "", err
		}
		if ok {
			lo, lastAt = mid, at
		} else {
			hi = mid
		}
	}
	if now.Sub(lastAt) <= IdempotencyWindow {
		return windowID(accountID, key, lo), nil
	}
	return windowID(accountID, key, hi), nil
}

// requestHash fingerprints a request for idempotency: the body as sent, so
// that nothing the decoding drops or normalises makes two requests equal.
func requestHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// PathContext binds an attachment's sealed URL to its email.
func PathContext(emailID string) string { return "attachment-path:" + emailID }

// AttachmentURL is the URL the pipeline downloads a path attachment from:
// the sealed one, or the clear path of emails queued before paths were
// sealed.
func (s *Service) AttachmentURL(emailID string, a email.Attachment) (string, error) {
	if a.SealedPath == "" {
		return a.Path, nil
	}
	b, err := s.box.Open(a.SealedPath, PathContext(emailID))
	return string(b), err
}

// validateSend checks a request field by field and decodes attachment
// contents. A list over its limit is reported once, not item by item.
func validateSend(req SendEmail) (*domain.ValidationError, [][]byte) {
	v := &domain.ValidationError{}
	if strings.TrimSpace(req.From) == "" {
		v.Add("from", "is required")
	} else if p := domain.TextProblem(req.From, false); p != "" {
		v.Add("from", "%s", p)
	} else if _, err := mailmsg.ParseNewAddress(req.From); err != nil {
		v.Add("from", "%s", err.Error())
	}
	if len(req.To) == 0 {
		v.Add("to", "is required")
	}
	n := len(req.To) + len(req.Cc) + len(req.Bcc)
	if n > MaxRecipients {
		v.Add("to", "at most %d recipients in to, cc and bcc together; got %d", MaxRecipients, n)
	}
	if len(req.ReplyTo) > MaxReplyTo {
		v.Add("reply_to", "at most %d addresses; got %d", MaxReplyTo, len(req.ReplyTo))
	}
	for _, l := range []struct {
		field string
		list  []string
		over  bool // reported above
	}{{"to", req.To, n > MaxRecipients}, {"cc", req.Cc, n > MaxRecipients}, {"bcc", req.Bcc, n > MaxRecipients},
		{"reply_to", req.ReplyTo, len(req.ReplyTo) > MaxReplyTo}} {
		if l.over {
			continue
		}
		for i, a := range l.list {
			f := fmt.Sprintf("%s.%d", l.field, i)
			if p := domain.TextProblem(a, false); p != "" {
				v.Add(f, "%s", p)
			} else if _, err := mailmsg.ParseNewAddress(a); err != nil {
				var several *mailmsg.AddressError
				if errors.As(err, &several) && several.Several {
					v.Add(f, "%s; send each as an item of the list", err.Error())
				} else {
					v.Add(f, "%s", err.Error())
				}
			}
		}
	}
	switch n := utf8.RuneCountInString(req.Subject); {
	case strings.TrimSpace(req.Subject) == "":
		v.Add("subject", "is required")
	case n > MaxSubjectLength:
		v.Add("subject", "must be at most %d characters; got %d", MaxSubjectLength, n)
	default:
		v.CheckLine("subject", req.Subject)
	}
	if req.HTML == "" && req.Text == "" {
		v.Add("html", "html or text is required")
	}
	v.CheckBody("html", req.HTML)
	v.CheckBody("text", req.Text)
	if len(req.Tags) > MaxTags {
		v.Add("tags", "at most %d tags; got %d", MaxTags, len(req.Tags))
	} else {
		for _, k := range slices.Sorted(maps.Keys(req.Tags)) { // the same errors in the same order every time
			val := req.Tags[k]
			nameOK := tagPattern.MatchString(k)
			if !nameOK {
				v.Add("tags", "tag name %s must be 1 to %d ASCII letters, digits, _ or -", domain.QuoteShort(k), MaxTagLength)
			} else if k == email.IDTag {
				v.Add("tags", "tag name %q is reserved: Mailroom uses it to carry the email id", k)
			}
			switch {
			case tagPattern.MatchString(val):
			case nameOK:
				v.Add("tags."+k, "must be 1 to %d ASCII letters, digits, _ or -", MaxTagLength)
			default: // a name that is no field name is not made one
				v.Add("tags", "the value of tag %s must be 1 to %d ASCII letters, digits, _ or -", domain.QuoteShort(k), MaxTagLength)
			}
		}
	}
	if len(req.Attachments) > MaxAttachments {
		v.Add("attachments", "at most %d attachments; got %d", MaxAttachments, len(req.Attachments))
		return v, nil
	}
	decoded := make([][]byte, len(req.Attachments))
	total := 0
	contentIDs := map[string]int{} // ContentIDKey -> the attachment that has it
	for i, a := range req.Attachments {
		f := func(name string) string { return fmt.Sprintf("attachments.%d.%s", i, name) }
		total += len(a.Content)
		pathBad := false // reported once: no file name is taken from it
		switch {
		case a.Content != "" && a.Path != "":
			v.Add(f("content"), "content and path are mutually exclusive")
		case a.Content == "" && a.Path == "":
			v.Add(f("content"), "content or path is required")
		case a.Content != "":
			b, err := decodeBase64(a.Content)
			if err != nil {
				v.Add(f("content"), "must be base64")
			}
			decoded[i] = b
			if strings.TrimSpace(a.Filename) == "" {
				v.Add(f("filename"), "is required with content")
			}
		case a.Path != "":
			if p := domain.URLProblem(a.Path); p != "" {
				v.Add(f("path"), "%s", p)
				pathBad = true
			} else if u, err := url.Parse(a.Path); err != nil {
				v.Add(f("path"), "%s", egress.Unreadable(err))
				pathBad = true
			} else if u.Host == "" {
				v.Add(f("path"), "must be an https URL with a host, like https://files.example.com/report.pdf")
				pathBad = true
			} // the egress policy judges the rest
		}
		if p := filenameProblem(a.Filename); p != "" {
			v.Add(f("filename"), "%s", p)
		} else if a.Filename == "" && a.Path != "" && !pathBad {
			// The name taken from the URL (decoded) meets the same rules.
			name := filenameOf(a.Path)
			if p := filenameProblem(name); p != "" {
				v.Add(f("path"), "gives the file name %q, which %s; set filename", name, p)
			}
		}
		switch {
		case len(a.ContentID) > MaxContentID:
			v.Add(f("content_id"), "must be at most %d bytes; got %d", MaxContentID, len(a.ContentID))
		case strings.ContainsAny(a.ContentID, " \t"):
			v.Add(f("content_id"), "must not contain spaces or line breaks")
		case domain.TextProblem(a.ContentID, false) != "":
			v.CheckLine(f("content_id"), a.ContentID)
		case a.ContentID != "":
			id := storedContentID(a.ContentID)
			if err := mailmsg.CheckContentID(id); err != nil {
				v.Add(f("content_id"), "%s", err)
			} else if j, dup := contentIDs[mailmsg.ContentIDKey(id)]; dup {
				v.Add(f("content_id"), "is already the content_id of attachment %d", j)
			} else {
				contentIDs[mailmsg.ContentIDKey(id)] = i
			}
		}
		if a.ContentType != "" {
			if p := ContentTypeProblem(a.ContentType); p != "" {
				v.Add(f("content_type"), "%s", p)
			}
		}
	}
	if total > MaxAttachmentBytes {
		v.Add("attachments", "attachments total %d bytes of base64, over the %d byte limit", total, MaxAttachmentBytes)
	}
	return v, decoded
}

// storedContentID is a content_id as the message carries it: without the
// angle brackets of its header form or the "cid:" of the URL an HTML body
// names it by (RFC 2392), which clients of other mail APIs write.
func storedContentID(id string) string {
	id = strings.Trim(id, "<>")
	if len(id) > 4 && strings.EqualFold(id[:4], "cid:") {
		id = id[4:]
	}
	return id
}

// decodeBase64 decodes standard base64, padded or not, with line breaks
// (which the decoder skips itself), spaces and tabs anywhere.
func decodeBase64(s string) ([]byte, error) {
	if strings.ContainsAny(s, " \t") { // rare: a copy without them
		s = strings.NewReplacer(" ", "", "\t", "").Replace(s)
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// ContentTypeProblem says what is wrong with an attachment's media type,
// or "". The pipeline asks it of the type a download's server gave, too.
func ContentTypeProblem(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case len(ct) > MaxContentType:
		return fmt.Sprintf("must be at most %d bytes; got %d", MaxContentType, len(ct))
	case domain.TextProblem(ct, false) != "":
		return domain.TextProblem(ct, false)
	case err != nil:
		return "must be a MIME type such as application/pdf"
	case strings.HasPrefix(mt, "multipart/") || strings.HasPrefix(mt, "message/"):
		return mt + " cannot be sent as an attachment"
	case mailmsg.CheckContentType(ct) != nil:
		return "must be a MIME type such as application/pdf, with parameter names of at most 64 characters and no '*'"
	}
	return ""
}

// filenameProblem says what is wrong with an attachment's file name, or "".
func filenameProblem(name string) string {
	switch {
	case utf8.RuneCountInString(name) > MaxFilenameLength:
		return fmt.Sprintf("must be at most %d characters; got %d", MaxFilenameLength, utf8.RuneCountInString(name))
	case strings.ContainsAny(name, "/\\"), strings.Contains(name, ".") && strings.Trim(name, ". ") == "":
		// A path, or a name of dots alone (".", ".."): a mail client
		// saving the file would take it for a directory.
		return "must be a plain file name"
	}
	return domain.TextProblem(name, false)
}

// filenameOf names a path attachment after its URL.
func filenameOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "attachment"
	}
	if name := path.Base(u.Path); name != "/" && strings.Trim(name, ". ") != "" {
		return name
	}
	return "attachment"
}

// sendableDomain is the id of the account's domain name when it may send,
// domain.ErrNotFound otherwise.
func (s *Service) sendableDomain(ctx context.Context, accountID, name string) (string, error) {
	if s.sendable != nil {
		return s.sendable(ctx, accountID, name)
	}
	dom, err := s.domains(ctx, accountID, name)
	if err != nil {
		return "", err
	}
	if !dom.CanSend() {
		return "", domain.ErrNotFound
	}
	return dom.ID, nil
}

// domainLookup reads an account's sending domain by name.
type domainLookup func(ctx context.Context, accountID, name string) (sendingdomain.State, error)
