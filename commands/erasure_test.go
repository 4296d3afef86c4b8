package commands_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/projections"
)

// sendFrom sends the valid request from `from` with its recipients
// replaced, and returns the email's id.
func (h *harness) sendFrom(t *testing.T, accountID, from string, to, cc, bcc []string) string {
	t.Helper()
	req, body := sendRequest(t)
	req.From, req.To, req.Cc, req.Bcc = from, to, cc, bcc
	got, err := h.svc.SendEmail(context.Background(), accountID, req, "", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	return got.ID
}

// addressKey is an address's keyed hash in accountID, as the harness's
// (zero) address keys make it.
func addressKey(accountID, address string) string {
	return datakeys.AddressKeys{}.Of(accountID, address)
}

// keyErased says whether the email's data key was destroyed; an email
// without one is an error.
func (h *harness) keyErased(ctx context.Context, emailID string) (bool, error) {
	id := codec.KeyID(emailID)
	keys, err := h.keyring().Lookup(ctx, id)
	k, ok := keys[id]
	if err == nil && !ok {
		err = fmt.Errorf("email %s has no data key", emailID)
	}
	return k.Erased(), err
}

// Erasing an address erases every email of the account sent to it, as to,
// cc or bcc, and no other: not the account's other emails, not another
// account's emails to the same address. Each goes with its content and its
// data key, and the request is recorded once, on the stream of the
// address's keyed hash.
func TestEraseRecipientErasesTheAccountsEmailsToTheAddress(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.verifiedDomain(t, other, "example.net")
	const from, bob = "news@example.com", "bob@example.org"
	toAnn := h.sendFrom(t, acct, from, []string{"Ann <ANN@example.org>"}, nil, nil)
	ccAnn := h.sendFrom(t, acct, from, []string{bob}, []string{"ann@example.org"}, nil)
	bccAnn := h.sendFrom(t, acct, from, []string{bob}, nil, []string{"ann@example.org"})
	notAnn := h.sendFrom(t, acct, from, []string{bob}, nil, nil)
	theirs := h.sendFrom(t, other, "news@example.net", []string{"ann@example.org"}, nil, nil)
	h.clock.Advance(time.Hour)
	h.appended(t)
	h.waitedFor()

	er, err := h.svc.EraseRecipient(ctx, acct, " ann@example.org ", meta)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{toAnn, ccAnn, bccAnn}; !slices.Equal(er.EmailIDs, want) ||
		er.AccountID != acct || er.ID == "" || !er.CreatedAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("erasure %+v, want emails %q of account %s", er, want, acct)
	}
	for _, id := range er.EmailIDs {
		st, err := h.svc.Email(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e := st.Erased; e == nil || e.Reason != email.ErasedOnRequest || e.ErasureID != er.ID || e.AccountID != acct {
			t.Errorf("email %s after the erasure: %+v", id, st.Erased)
		}
		if erased, err := h.keyErased(ctx, id); err != nil || !erased {
			t.Errorf("email %s's data key after the erasure: erased %v, %v; want destroyed", id, erased, err)
		}
	}
	for _, id := range []string{notAnn, theirs} {
		if st, err := h.svc.Email(ctx, id); err != nil || st.Erased != nil {
			t.Errorf("email %s, not the account's to ann: erased %+v, %v", id, st.Erased, err)
		}
		if erased, err := h.keyErased(ctx, id); err != nil || erased {
			t.Errorf("email %s's data key: erased %v, %v; want kept", id, erased, err)
		}
	}
	if left := storedBlobs(t, h); len(left) != 2*3 { // html, text and an attachment
		t.Errorf("%d blobs left, want those of the 2 emails kept", len(left))
	}
	c := only[*account.ErasureCompleted](t, h, account.ErasureStream(acct, addressKey(acct, "ann@example.org")))
	if c.ErasureID != er.ID || c.AccountID != acct || !slices.Equal(c.EmailIDs, er.EmailIDs) {
		t.Errorf("recorded %+v, want the erasure %+v", c, er)
	}
	if n := h.appended(t); n != 4 {
		t.Errorf("the erasure appended %d events, want one per email and its completion", n)
	}
	if w := h.waitedFor(); !slices.Contains(w, projections.EmailsName) || !slices.Contains(w, projections.AccountsName) {
		t.Errorf("waited for %q, want the emails and accounts projections", w)
	}
}

// A repeat of an erasure within ErasureRepeatWindow that finds nothing new
// is answered with the first erasure and records nothing; after the window,
// or once a new email went to the address, a request is an erasure of its
// own.
func TestEraseRecipientRepeated(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	first := h.sendFrom(t, acct, "news@example.com", []string{"ann@example.org"}, nil, nil)
	er, err := h.svc.EraseRecipient(ctx, acct, "ann@example.org", meta)
	if err != nil {
		t.Fatal(err)
	}
	h.appended(t)

	h.clock.Advance(commands.ErasureRepeatWindow)
	again, err := h.svc.EraseRecipient(ctx, acct, "ANN@example.org", meta)
	if err != nil || again.ID != er.ID || !slices.Equal(again.EmailIDs, []string{first}) || !again.CreatedAt.Equal(er.CreatedAt) {
		t.Fatalf("a repeat within the window: %+v, %v; want the first erasure %+v", again, err, er)
	}
	h.nothingAppended(t, "a repeated erasure")

	h.clock.Advance(time.Second)
	later, err := h.svc.EraseRecipient(ctx, acct, "ann@example.org", meta)
	if err != nil || later.ID == er.ID || len(later.EmailIDs) != 0 {
		t.Fatalf("a request after the window: %+v, %v; want a new erasure of nothing", later, err)
	}
	if n := h.appended(t); n != 1 {
		t.Fatalf("a request after the window appended %d events, want its completion", n)
	}

	second := h.sendFrom(t, acct, "news@example.com", []string{"ann@example.org"}, nil, nil)
	h.appended(t)
	next, err := h.svc.EraseRecipient(ctx, acct, "ann@example.org", meta)
	if err != nil || next.ID == later.ID || !slices.Equal(next.EmailIDs, []string{second}) {
		t.Fatalf("a request finding a new email: %+v, %v; want a new erasure of it", next, err)
	}
}

// An erasure request names an address alone, of an account that exists;
// a refused request records nothing.
func TestEraseRecipientRefusals(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.appended(t)
	for _, address := range []string{"", "  ", "not an address", "Ann <ann@example.org>"} {
		if _, err := h.svc.EraseRecipient(ctx, acct, address, meta); !slices.Equal(fields(t, err), []string{"email"}) {
			t.Errorf("erase %q: %v, want an error on email", address, err)
		}
	}
	for _, id := range []string{"3b0f7c4e-8f5a-4d52-9a0e-6c1f1d1e2a3b", "not-an-id"} {
		if _, err := h.svc.EraseRecipient(ctx, id, "ann@example.org", meta); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("erase for account %s: %v, want not found", id, err)
		}
	}
	h.nothingAppended(t, "refused erasures")
}

// EraseEmail reports whether it recorded the erasure: an email erased
// already is erased again without error and without a record, and an email
// the log does not hold is not found.
func TestEraseEmailReportsWhetherItErased(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	h.appended(t)
	if erased, err := h.svc.EraseEmail(ctx, id, email.ErasedByRetention, "", meta); err != nil || !erased {
		t.Fatalf("erase: %v, %v; want recorded", erased, err)
	}
	if got := h.types(t, email.Stream(id)); !slices.Equal(got, []string{"EmailQueued", "EmailErased"}) {
		t.Fatalf("email stream %q, want the erasure recorded", got)
	}
	h.appended(t)
	if erased, err := h.svc.EraseEmail(ctx, id, email.ErasedByRetention, "", meta); err != nil || erased {
		t.Fatalf("erase again: %v, %v; want nothing recorded and no error", erased, err)
	}
	for _, id := range []string{"3b0f7c4e-8f5a-4d52-9a0e-6c1f1d1e2a3b", "not-an-id"} {
		if _, err := h.svc.EraseEmail(ctx, id, email.ErasedByRetention, "", meta); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("erase %s: %v, want not found", id, err)
		}
	}
	h.nothingAppended(t, "erasures of an erased or unknown email")
}

// An email's erasure deletes the attachments the pipeline downloaded for
// it, which only its scan names, as well as the content it was sent with.
func TestEraseEmailDeletesItsDownloadedAttachments(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	req, body := sendRequest(t)
	req.Attachments = append(req.Attachments, commands.SendAttachment{Path: "https://192.0.2.7/report.pdf"})
	sent, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	q := only[*email.Queued](t, h, email.Stream(sent.ID))
	downloaded, err := h.content().Put(ctx, sent.ID, acct, []byte("%PDF-1.7 report"))
	if err != nil {
		t.Fatal(err)
	}
	scanned := slices.Clone(q.Attachments)
	scanned[1].Digest, scanned[1].SizeBytes = string(downloaded[0]), 15
	if err := h.svc.RecordEmailSent(ctx, sent.ID, commands.Acceptance{MessageID: "ses-1", At: start, Attachments: scanned}, meta); err != nil {
		t.Fatal(err)
	}
	if n := len(storedBlobs(t, h)); n != 4 {
		t.Fatalf("%d blobs before the erasure, want the bodies and both attachments", n)
	}
	if _, err := h.svc.EraseEmail(ctx, sent.ID, email.ErasedByRetention, "", meta); err != nil {
		t.Fatal(err)
	}
	if left := storedBlobs(t, h); len(left) != 0 {
		t.Fatalf("%d blobs left after the erasure: %q", len(left), left)
	}
}
