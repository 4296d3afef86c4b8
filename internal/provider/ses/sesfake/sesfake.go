// Package sesfake is a protocol-level FAKE of the two AWS APIs the ses
// provider uses (SES v2 and SQS), for tests that cannot reach AWS. It is not
// AWS: it records requests and answers from canned responses and an
// in-memory queue, and checks no signatures.
package sesfake

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// URL is where the fake listens; point the provider's Endpoint at it.
func (f *Server) URL() string { return f.srv.URL }

// Close stops the fake, as an outage would.
func (f *Server) Close() { f.srv.Close() }

// Server is a protocol-level FAKE of the two AWS APIs the provider uses,
// served from one httptest server (the provider points both clients at
// Config.Endpoint):
//
//   - SES v2 (REST-JSON: method + /v2/email/... path, JSON bodies, errors as
//     an HTTP status with an X-Amzn-ErrorType header and {"message": ...});
//   - SQS (AWS JSON 1.0: POST /, X-Amz-Target AmazonSQS.ReceiveMessage or
//     AmazonSQS.DeleteMessage, Content-Type application/x-amz-json-1.0);
//   - STS GetCallerIdentity (AWS Query: POST / with a form body, an XML
//     answer naming Account), which a client pointed at the same endpoint
//     asks to learn the account its identities' ARNs name.
//
// It is not AWS: it records every request and answers from canned
// responses, an in-memory queue and in-memory email identities (create,
// get, signing key, MAIL FROM, tag, delete, with their tags). It checks no
// signatures and verifies no DNS.
type Server struct {
	t   testing.TB
	srv *httptest.Server

	mu       sync.Mutex
	requests []Request
	// errors maps "METHOD /path" (SES) or "AmazonSQS.Op" (SQS) to a canned
	// error answer, used once per entry in the slice.
	errors map[string][]Error

	// SQS queue state.
	messages []*message
	nextID   int
	events   []string // "receive <id>", "delete <id>", appended in order

	// SES identity state.
	identities     map[string]*Identity
	identityLog    []string // "create <name>", "set_signing_key <name>", "mail_from <name>", "tag <name>", "delete <name>"
	dkimStatus     string   // what GetEmailIdentity reports for every identity
	mailFromStatus string
	maxSendRate    float64 // GetAccount's SendQuota.MaxSendRate
	account        AccountStatus
}

// AccountStatus is what GetAccount reports beside the quota. The default
// is a production account in good standing.
type AccountStatus struct {
	Sandbox       bool   // ProductionAccessEnabled false
	SendingPaused bool   // SendingEnabled false
	Enforcement   string // EnforcementStatus; HEALTHY when empty
}

// SetAccountStatus sets the status GetAccount reports.
func (f *Server) SetAccountStatus(s AccountStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.account = s
}

// SetMaxSendRate sets the SendQuota.MaxSendRate GetAccount reports
// (default 14, a new production account's).
func (f *Server) SetMaxSendRate(rate float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maxSendRate = rate
}

// Identity is an email identity as the fake holds it.
type Identity struct {
	Tags           map[string]string
	Selector       string // BYODKIM selector; "" for Easy DKIM
	PrivateKey     string // BYODKIM key as sent: base64 of its DER
	MailFromDomain string
}

// SetStatuses sets the DKIM and MAIL FROM verification statuses that
// GetEmailIdentity reports for every identity. By default DKIM is SUCCESS
// and MAIL FROM PENDING.
func (f *Server) SetStatuses(dkim, mailFrom string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dkimStatus, f.mailFromStatus = dkim, mailFrom
}

// Account is the AWS account the fake answers for: STS names it, and the
// identity ARNs TagResource takes must name it
// (arn:aws:ses:<region>:<Account>:identity/<name>).
const Account = "123456789012"

type Request struct {
	Method string
	Path   string
	Target string
	Body   map[string]any
}

type Error struct {
	Status int
	Code   string
	Msg    string
}

type message struct {
	ID, Body, Receipt string
	Visible, Deleted  bool
}

func Start(t testing.TB) *Server {
	f := &Server{t: t, errors: map[string][]Error{}, identities: map[string]*Identity{},
		dkimStatus: "SUCCESS", mailFromStatus: "PENDING", maxSendRate: 14}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *Server) FailNext(key string, e Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors[key] = append(f.errors[key], e)
}

func (f *Server) Recorded() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

func (f *Server) Enqueue(body string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := "msg-" + strconv.Itoa(f.nextID)
	f.messages = append(f.messages, &message{ID: id, Body: body, Visible: true})
	return id
}

// expireVisibility makes every received but undeleted message visible
// again, as SQS does when the visibility timeout runs out.
func (f *Server) ExpireVisibility() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.messages {
		if !m.Deleted {
			m.Visible = true
		}
	}
}

func (f *Server) Log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// Identity returns a copy of the identity called name.
func (f *Server) Identity(name string) (Identity, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.identities[name]
	if !ok {
		return Identity{}, false
	}
	out := *id
	out.Tags = map[string]string{}
	for k, v := range id.Tags {
		out.Tags[k] = v
	}
	return out, true
}

// PutIdentity stores an identity as if it had been made outside the test
// (before owner tags, or by another tool).
func (f *Server) PutIdentity(name string, id Identity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id.Tags == nil {
		id.Tags = map[string]string{}
	}
	f.identities[name] = &id
}

// IdentityLog lists the identity changes the fake carried out, in order.
func (f *Server) IdentityLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.identityLog...)
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		f.serveQuery(w, r, raw)
		return
	}
	var body map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			f.t.Errorf("fake: request body is not JSON: %v: %q", err, raw)
		}
	}
	target := r.Header.Get("X-Amz-Target")
	key := r.Method + " " + r.URL.EscapedPath()
	if target != "" {
		key = target
	}
	f.mu.Lock()
	f.requests = append(f.requests, Request{Method: r.Method, Path: r.URL.EscapedPath(), Target: target, Body: body})
	var canned *Error
	if q := f.errors[key]; len(q) > 0 {
		canned = &q[0]
		f.errors[key] = q[1:]
	}
	f.mu.Unlock()

	if strings.HasPrefix(target, "AmazonSQS.") {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if canned != nil {
			w.Header().Set("X-Amzn-ErrorType", canned.Code)
			w.WriteHeader(canned.Status)
			_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + canned.Code, "message": canned.Msg})
			return
		}
		f.serveSQS(w, r, strings.TrimPrefix(target, "AmazonSQS."), body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if canned != nil {
		w.Header().Set("X-Amzn-ErrorType", canned.Code)
		w.WriteHeader(canned.Status)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": canned.Msg})
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v2/email/outbound-emails":
		_ = json.NewEncoder(w).Encode(map[string]string{"MessageId": "0100018f-fake-ses-message-id-000000"})
	case r.Method == http.MethodGet && r.URL.Path == "/v2/email/account":
		f.mu.Lock()
		rate, acct := f.maxSendRate, f.account
		f.mu.Unlock()
		quota := 50000.0
		if acct.Sandbox {
			quota = 200
		}
		if acct.Enforcement == "" {
			acct.Enforcement = "HEALTHY"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"SendQuota":      map[string]any{"Max24HourSend": quota, "MaxSendRate": rate, "SentLast24Hours": 0},
			"SendingEnabled": !acct.SendingPaused, "ProductionAccessEnabled": !acct.Sandbox,
			"EnforcementStatus": acct.Enforcement,
		})
	case r.Method == http.MethodPost && r.URL.Path == "/v2/email/identities":
		f.createIdentity(w, body)
	case r.Method == http.MethodPost && r.URL.Path == "/v2/email/tags":
		f.tagResource(w, body)
	case strings.HasPrefix(r.URL.Path, "/v2/email/identities/"):
		name, sub, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/email/identities/"), "/")
		f.serveIdentity(w, r.Method, name, sub, body)
	default:
		writeError(w, http.StatusNotFound, "UnknownOperationException", "fake: no such operation")
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// createIdentity is CreateEmailIdentity.
func (f *Server) createIdentity(w http.ResponseWriter, body map[string]any) {
	name, _ := body["EmailIdentity"].(string)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.identities[name]; ok {
		writeError(w, http.StatusBadRequest, "AlreadyExistsException", "Email identity "+name+" already exist.")
		return
	}
	id := &Identity{Tags: map[string]string{}}
	tags, _ := body["Tags"].([]any)
	for _, t := range tags {
		m, _ := t.(map[string]any)
		k, _ := m["Key"].(string)
		v, _ := m["Value"].(string)
		id.Tags[k] = v
	}
	if attrs, ok := body["DkimSigningAttributes"].(map[string]any); ok {
		id.Selector, _ = attrs["DomainSigningSelector"].(string)
		id.PrivateKey, _ = attrs["DomainSigningPrivateKey"].(string)
	}
	f.identities[name] = id
	f.identityLog = append(f.identityLog, "create "+name)
	_ = json.NewEncoder(w).Encode(map[string]any{"IdentityType": "DOMAIN", "VerifiedForSendingStatus": false})
}

// tagResource is TagResource on an email identity, named by its ARN.
func (f *Server) tagResource(w http.ResponseWriter, body map[string]any) {
	arn, _ := body["ResourceArn"].(string)
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] != "aws" || parts[2] != "ses" || parts[4] != Account || !strings.HasPrefix(parts[5], "identity/") {
		writeError(w, http.StatusBadRequest, "BadRequestException", "fake: not an email identity ARN of account "+Account+": "+arn)
		return
	}
	name := strings.TrimPrefix(parts[5], "identity/")
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.identities[name]
	if !ok {
		writeError(w, http.StatusNotFound, "NotFoundException", "Resource "+arn+" does not exist.")
		return
	}
	tags, _ := body["Tags"].([]any)
	for _, t := range tags {
		m, _ := t.(map[string]any)
		k, _ := m["Key"].(string)
		v, _ := m["Value"].(string)
		id.Tags[k] = v
	}
	f.identityLog = append(f.identityLog, "tag "+name)
	_, _ = w.Write([]byte("{}"))
}

// serveQuery answers the AWS Query protocol, of which the fake knows STS
// GetCallerIdentity; a canned error is keyed "STS.<Action>".
func (f *Server) serveQuery(w http.ResponseWriter, r *http.Request, raw []byte) {
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		f.t.Errorf("fake: query body is not a form: %v: %q", err, raw)
	}
	action := form.Get("Action")
	body := map[string]any{}
	for k := range form {
		body[k] = form.Get(k)
	}
	target := "STS." + action
	f.mu.Lock()
	f.requests = append(f.requests, Request{Method: r.Method, Path: r.URL.EscapedPath(), Target: target, Body: body})
	var canned *Error
	if q := f.errors[target]; len(q) > 0 {
		canned = &q[0]
		f.errors[target] = q[1:]
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	switch {
	case canned != nil:
		w.WriteHeader(canned.Status)
		fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>fake</RequestId></ErrorResponse>`, canned.Code, canned.Msg)
	case action == "GetCallerIdentity":
		fmt.Fprintf(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult><Arn>arn:aws:iam::%[1]s:user/mailroom</Arn><UserId>AIDAFAKE</UserId><Account>%[1]s</Account></GetCallerIdentityResult><ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata></GetCallerIdentityResponse>`, Account)
	default:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAction</Code><Message>fake: no such action %s</Message></Error><RequestId>fake</RequestId></ErrorResponse>`, action)
	}
}

// serveIdentity is GetEmailIdentity, DeleteEmailIdentity and the PUTs of
// signing attributes and MAIL FROM.
func (f *Server) serveIdentity(w http.ResponseWriter, method, name, sub string, body map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.identities[name]
	if !ok {
		writeError(w, http.StatusNotFound, "NotFoundException", "Email identity "+name+" does not exist.")
		return
	}
	switch {
	case method == http.MethodGet && sub == "":
		origin := "AWS_SES"
		if id.Selector != "" {
			origin = "EXTERNAL"
		}
		tags := []map[string]string{}
		for k, v := range id.Tags {
			tags = append(tags, map[string]string{"Key": k, "Value": v})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"IdentityType": "DOMAIN", "VerifiedForSendingStatus": true, "Tags": tags,
			"DkimAttributes":     map[string]any{"Status": f.dkimStatus, "SigningAttributesOrigin": origin},
			"MailFromAttributes": map[string]any{"MailFromDomain": id.MailFromDomain, "MailFromDomainStatus": f.mailFromStatus, "BehaviorOnMxFailure": "USE_DEFAULT_VALUE"},
		})
	case method == http.MethodDelete && sub == "":
		delete(f.identities, name)
		f.identityLog = append(f.identityLog, "delete "+name)
		_, _ = w.Write([]byte("{}"))
	case method == http.MethodPut && sub == "dkim/signing":
		attrs, _ := body["SigningAttributes"].(map[string]any)
		id.Selector, _ = attrs["DomainSigningSelector"].(string)
		id.PrivateKey, _ = attrs["DomainSigningPrivateKey"].(string)
		f.identityLog = append(f.identityLog, "set_signing_key "+name)
		_ = json.NewEncoder(w).Encode(map[string]any{"DkimStatus": "PENDING", "DkimTokens": []string{id.Selector}})
	case method == http.MethodPut && sub == "mail-from":
		id.MailFromDomain, _ = body["MailFromDomain"].(string)
		f.identityLog = append(f.identityLog, "mail_from "+name)
		_, _ = w.Write([]byte("{}"))
	default:
		writeError(w, http.StatusNotFound, "UnknownOperationException", "fake: no such operation")
	}
}

func (f *Server) serveSQS(w http.ResponseWriter, r *http.Request, op string, body map[string]any) {
	switch op {
	case "ReceiveMessage":
		max := 1
		if n, ok := body["MaxNumberOfMessages"].(float64); ok {
			max = int(n)
		}
		// A short stand-in for the long poll: wait a little when empty.
		for range 5 {
			if out := f.receive(max); len(out) > 0 {
				_ = json.NewEncoder(w).Encode(map[string]any{"Messages": out})
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		_, _ = w.Write([]byte("{}"))
	case "DeleteMessage":
		handle, _ := body["ReceiptHandle"].(string)
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, m := range f.messages {
			if m.Receipt == handle && handle != "" {
				m.Deleted = true
				f.events = append(f.events, "delete "+m.ID)
				_, _ = w.Write([]byte("{}"))
				return
			}
		}
		w.Header().Set("X-Amzn-ErrorType", "ReceiptHandleIsInvalid")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#ReceiptHandleIsInvalid","message":"fake: unknown receipt handle"}`))
	default:
		w.Header().Set("X-Amzn-ErrorType", "UnsupportedOperation")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#UnsupportedOperation","message":"fake: unsupported"}`))
	}
}

func (f *Server) receive(max int) []map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]string
	for _, m := range f.messages {
		if len(out) == max {
			break
		}
		if m.Deleted || !m.Visible {
			continue
		}
		m.Visible = false
		f.nextID++
		m.Receipt = "rh-" + m.ID + "-" + strconv.Itoa(f.nextID)
		sum := md5.Sum([]byte(m.Body))
		out = append(out, map[string]string{
			"MessageId": m.ID, "ReceiptHandle": m.Receipt,
			"MD5OfBody": hex.EncodeToString(sum[:]), "Body": m.Body,
		})
		f.events = append(f.events, "receive "+m.ID)
	}
	return out
}
