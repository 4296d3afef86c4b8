package commands_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/projections"
)

// These tests run the command service on the in-memory event store. What
// the service reads from read models is answered from the store's log, as
// the projections would answer once caught up. Emails' data keys are in a
// PostgreSQL database of the test's own.

// start is the tests' clock reading before any advance.
var start = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// meta is the metadata of every command the tests send.
var meta = commands.Meta{Actor: "apikey:k_test", RequestID: "req-1", ClientRequestID: "client-1"}

// clock is a fixed time that tests move on.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is a command service with what it depends on.
type harness struct {
	svc   *commands.Service
	store *memory.Store
	clock *clock
	box   *secretbox.Box
	blobs *blob.FS
	// blobDir is where blobs holds what it stores.
	blobDir string
	// content seals emails' content into blobs, with data keys kept in
	// a test database made on first use: most tests send nothing.
	content func() *datakeys.Blobs
	keyring func() *datakeys.Keyring

	sender string // an account with a verified domain, once queuedEmail made it

	mu        sync.Mutex
	settled   []projections.Name // projectors waited for, in order
	visible   bool               // what Settle answers
	keysMade  int
	storeSeen int // events in the store when the test last looked
}

// allowedNet holds the only addresses the tests' egress policy accepts
// besides public ones: TEST-NET-1, which no test connects to.
const allowedNet = "192.0.2.0/24"

func newHarness(t *testing.T, change ...func(*commands.Deps)) *harness {
	t.Helper()
	h := &harness{store: memory.New(), clock: &clock{now: start}, visible: true}
	t.Cleanup(func() { h.store.Close() })
	var err error
	if h.box, err = secretbox.New(make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	h.blobDir = t.TempDir()
	if h.blobs, err = blob.NewFS(h.blobDir); err != nil {
		t.Fatal(err)
	}
	h.keyring = sync.OnceValue(func() *datakeys.Keyring { return datakeys.New(pgtest.NewPool(t), h.box) })
	h.content = sync.OnceValue(func() *datakeys.Blobs { return datakeys.NewBlobs(h.blobs, h.keyring()) })
	allowed, err := egress.ParseCIDRs(allowedNet)
	if err != nil {
		t.Fatal(err)
	}
	d := commands.Deps{
		Store: h.store,
		Settle: func(_ context.Context, _ eventstore.Position, projectors ...projections.Name) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.settled = append(h.settled, projectors...)
			if !h.visible {
				return &projections.LagError{Behind: projectors, Timeout: time.Second}
			}
			return nil
		},
		Now:           h.clock.Now,
		Box:           h.box,
		Region:        "eu-west-1",
		Content:       contentOnUse(h.content),
		DataKeys:      keysOnUse(h.keyring),
		EmailsSentTo:  h.emailsSentTo,
		Egress:        egress.Policy{AllowCIDRs: allowed},
		Domains:       h.accountDomain,
		DomainsNamed:  h.domainsNamed,
		DomainCount:   h.domainCount,
		EndpointIDs:   h.endpointIDs,
		ActiveAPIKeys: h.activeAPIKeys,
		KeyGenerated: func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.keysMade++
		},
	}
	for _, c := range change {
		c(&d)
	}
	h.svc = commands.New(d)
	return h
}

// contentOnUse is sealed content opened when first used.
type contentOnUse func() *datakeys.Blobs

func (c contentOnUse) Put(ctx context.Context, emailID, accountID string, parts ...[]byte) ([]blob.Digest, error) {
	return c().Put(ctx, emailID, accountID, parts...)
}

func (c contentOnUse) Delete(ctx context.Context, digests ...blob.Digest) error {
	return c().Delete(ctx, digests...)
}

// keysOnUse is the data keys opened when first used.
type keysOnUse func() *datakeys.Keyring

func (k keysOnUse) Destroy(ctx context.Context, id, accountID string) error {
	return k().Destroy(ctx, id, accountID)
}

// setVisible sets whether the read models show a write in time.
func (h *harness) setVisible(v bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.visible = v
}

// waitedFor returns the projectors waited for since the last call.
func (h *harness) waitedFor() []projections.Name {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.settled
	h.settled = nil
	return w
}

func (h *harness) keysGenerated() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.keysMade
}

// log is every event in the store, decoded, in global order.
func (h *harness) log(ctx context.Context) ([]domain.Event, error) {
	var out []domain.Event
	for pos := eventstore.Start; ; {
		recs, err := h.store.ReadAll(ctx, pos, 1000)
		if err != nil || len(recs) == 0 {
			return out, err
		}
		for _, r := range recs {
			e, err := codec.Decode(r)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
			pos = r.Position
		}
	}
}

// readModel folds the log into the states the read models hold.
type readModel struct {
	domains   map[string]sendingdomain.State
	keys      map[string]apikey.State
	endpoints map[string]webhook.State
}

func (h *harness) readModel(ctx context.Context) (readModel, error) {
	m := readModel{domains: map[string]sendingdomain.State{}, keys: map[string]apikey.State{}, endpoints: map[string]webhook.State{}}
	evs, err := h.log(ctx)
	if err != nil {
		return m, err
	}
	for _, e := range evs {
		switch e := e.(type) {
		case *sendingdomain.Added:
			m.domains[e.DomainID] = sendingdomain.Evolve(sendingdomain.State{}, e)
		case *apikey.Created:
			m.keys[e.KeyID] = apikey.Evolve(apikey.State{}, e)
		case *apikey.Revoked:
			m.keys[e.KeyID] = apikey.Evolve(m.keys[e.KeyID], e)
		case *webhook.Created:
			m.endpoints[e.EndpointID] = webhook.Evolve(webhook.State{}, e)
		case *webhook.Deleted:
			delete(m.endpoints, e.EndpointID)
		}
	}
	// Other domain events name their domain only in the stream.
	for id := range m.domains {
		recs, err := h.store.ReadStream(ctx, sendingdomain.Stream(id), 0, 1000)
		if err != nil {
			return m, err
		}
		var st sendingdomain.State
		for _, r := range recs {
			e, err := codec.Decode(r)
			if err != nil {
				return m, err
			}
			st = sendingdomain.Evolve(st, e)
		}
		if st.Removed {
			delete(m.domains, id)
		} else {
			m.domains[id] = st
		}
	}
	return m, nil
}

func (h *harness) accountDomain(ctx context.Context, accountID, name string) (sendingdomain.State, error) {
	m, err := h.readModel(ctx)
	if err != nil {
		return sendingdomain.State{}, err
	}
	for _, d := range m.domains {
		if d.AccountID == accountID && d.Name == name {
			return d, nil
		}
	}
	return sendingdomain.State{}, domain.ErrNotFound
}

func (h *harness) domainsNamed(ctx context.Context, name string) ([]sendingdomain.State, error) {
	m, err := h.readModel(ctx)
	var out []sendingdomain.State
	for _, d := range m.domains {
		if d.Name == name {
			out = append(out, d)
		}
	}
	return out, err
}

func (h *harness) domainCount(ctx context.Context, accountID string) (int, error) {
	m, err := h.readModel(ctx)
	n := 0
	for _, d := range m.domains {
		if d.AccountID == accountID {
			n++
		}
	}
	return n, err
}

func (h *harness) endpointIDs(ctx context.Context, accountID string) ([]string, error) {
	m, err := h.readModel(ctx)
	var out []string
	for id, ep := range m.endpoints {
		if ep.AccountID == accountID {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, err
}

func (h *harness) activeAPIKeys(ctx context.Context, accountID string) (int, error) {
	m, err := h.readModel(ctx)
	n := 0
	for _, k := range m.keys {
		if k.AccountID == accountID && k.Active {
			n++
		}
	}
	return n, err
}

// emailsSentTo lists the account's emails to the address whose keyed hash
// is addressKey, as to, cc or bcc, less those erased.
func (h *harness) emailsSentTo(ctx context.Context, accountID, addressKey string) ([]string, error) {
	evs, err := h.log(ctx)
	var out []string
	for _, e := range evs {
		switch e := e.(type) {
		case *email.Queued:
			if e.AccountID == accountID && slices.Contains(e.RecipientKeys, addressKey) {
				out = append(out, e.EmailID)
			}
		case *email.Erased:
			out = slices.DeleteFunc(out, func(id string) bool { return id == e.EmailID })
		}
	}
	return out, err
}

// stream returns a stream's records and their decoded events.
func (h *harness) stream(t *testing.T, name string) ([]eventstore.RecordedEvent, []domain.Event) {
	t.Helper()
	recs, err := h.store.ReadStream(context.Background(), name, 0, 10000)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	evs := make([]domain.Event, len(recs))
	for i, r := range recs {
		if evs[i], err = codec.Decode(r); err != nil {
			t.Fatalf("decode %s@%d: %v", name, r.StreamRevision, err)
		}
	}
	return recs, evs
}

// types lists the event types of a stream, in order.
func (h *harness) types(t *testing.T, name string) []string {
	t.Helper()
	recs, _ := h.stream(t, name)
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Type
	}
	return out
}

// appended returns how many events were appended since the last call (or
// the harness's start).
func (h *harness) appended(t *testing.T) int {
	t.Helper()
	n, err := h.store.CountAfter(context.Background(), eventstore.Start, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	d := int(n) - h.storeSeen
	h.storeSeen = int(n)
	return d
}

// nothingAppended fails when anything was appended since the last count:
// a refused command must leave no trace.
func (h *harness) nothingAppended(t *testing.T, what string) {
	t.Helper()
	if n := h.appended(t); n != 0 {
		t.Fatalf("%s appended %d events", what, n)
	}
}

// endpoint creates a webhook endpoint of accountID.
func (h *harness) endpoint(t *testing.T, accountID string) webhook.State {
	t.Helper()
	st, _, err := h.svc.CreateWebhook(context.Background(), accountID, webhook.Settings{URL: ptr(hookURL)}, meta)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// only returns the single event of a stream as a T.
func only[T domain.Event](t *testing.T, h *harness, name string) T {
	t.Helper()
	_, evs := h.stream(t, name)
	if len(evs) != 1 {
		t.Fatalf("%s has %d events, want 1", name, len(evs))
	}
	e, ok := evs[0].(T)
	if !ok {
		t.Fatalf("%s holds %T, want %T", name, evs[0], e)
	}
	return e
}

// fields names the fields a validation error reports, in order.
func fields(t *testing.T, err error) []string {
	t.Helper()
	var v *domain.ValidationError
	if !errors.As(err, &v) {
		t.Fatalf("want a validation error, got %v", err)
	}
	out := make([]string, len(v.Errors))
	for i, f := range v.Errors {
		out[i] = f.Field
	}
	return out
}

func wantConflict(t *testing.T, err error, code string) {
	t.Helper()
	var c *domain.ConflictError
	if !errors.As(err, &c) || c.Code != code {
		t.Fatalf("want conflict %s, got %v", code, err)
	}
}

func wantLimit(t *testing.T, err error) {
	t.Helper()
	var l *commands.LimitError
	if !errors.As(err, &l) {
		t.Fatalf("want a limit error, got %v", err)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// newAccount creates an account and returns its id.
func (h *harness) newAccount(t *testing.T) string {
	t.Helper()
	return must[commands.NewAccount](t)(h.svc.CreateAccount(context.Background(), "Acme", meta)).AccountID
}

// verifiedDomain gives the account a verified domain of name (on Easy DKIM,
// which needs no RSA key) and returns its id.
func (h *harness) verifiedDomain(t *testing.T, accountID, name string) string {
	t.Helper()
	ctx := context.Background()
	d := must[sendingdomain.State](t)(h.svc.ImportLegacyDomain(ctx, accountID, name, meta))
	if err := h.svc.VerifyDomainBySandbox(ctx, d.ID, meta); err != nil {
		t.Fatal(err)
	}
	return d.ID
}

// appendEvent appends a domain event to a stream whatever it holds, as
// events from before a stream was introduced, or from a crash, are found.
func (h *harness) appendEvent(t *testing.T, stream string, e domain.Event) {
	t.Helper()
	data, err := codec.Encode(e, eventstore.Metadata{Actor: "system:test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(context.Background(), stream, eventstore.Any, data); err != nil {
		t.Fatal(err)
	}
}

// Work reacting to an event whose story is unknown (a job queued by a
// release that kept none) starts a run of its own, still naming the event
// as its cause: request_id is always a request's or a run's id.
func TestFollowingAnEventWithoutAStoryStartsARun(t *testing.T) {
	m := commands.Meta{Actor: "system:email-pipeline"}.Following("01a21fce-bb69-789f-85d1-2e06083d9161", "")
	if !strings.HasPrefix(m.RequestID, "run_") || len(m.RequestID) != len("run_")+26 {
		t.Errorf("request id %q, want a fresh run_ id", m.RequestID)
	}
	if m.CausationID != "01a21fce-bb69-789f-85d1-2e06083d9161" || m.Actor != "system:email-pipeline" {
		t.Errorf("causation %q, actor %q; want the event's id and the worker", m.CausationID, m.Actor)
	}
	if k := (commands.Meta{}).Following("ev", "req_KVJB4SPMNTMG3XJJVNZVK6RUCK"); k.RequestID != "req_KVJB4SPMNTMG3XJJVNZVK6RUCK" || k.CausationID != "ev" {
		t.Errorf("with a story: %+v, want it kept", k)
	}
}
