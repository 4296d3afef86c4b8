package processmanagers

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
	whsig "github.com/mailroom/mailroom/webhook"
)

type attemptWorker struct {
	river.WorkerDefaults[AttemptArgs]
	w *Webhooks
}

// Timeout covers the receiver's 10 s and recording the outcome.
func (*attemptWorker) Timeout(*river.Job[AttemptArgs]) time.Duration { return time.Minute }

// busy is how long an attempt that found no place within its shares waits
// in the queue before asking again, instead of holding one of the
// process's slots: 200–600 ms at first, doubling with each time the job
// found none (waits), up to about the time the full share's places take
// to free (pace) but at most busyMax, ±50 %. A slow receiver's backlog
// then asks every few seconds per job instead of several times a second,
// while a fast one's, whose places free within milliseconds, never waits
// longer than 600 ms.
func busy(waits int, pace time.Duration) time.Duration {
	d := busyMin << min(waits, 8)
	d = min(d, max(busyMin, min(pace, busyMax)))
	return d/2 + rand.N(d)
}

// busyMax keeps busy, jitter included, under River's scheduler interval
// (5 s): a longer snooze would wait for the scheduler to make the job
// available again.
const busyMin, busyMax = 400 * time.Millisecond, 3 * time.Second

// shareWait is how long an attempt waits in the process for a place within
// its shares: a fast receiver frees one within milliseconds, so its
// account's backlog flows without a round trip through the queue; a slow
// one does not, and its attempts go back to the queue.
const shareWait = 250 * time.Millisecond

// Work makes the attempt if it is still due and its endpoint may receive
// it, records it, and queues the next when it failed with retries left.
// Behind a slow receiver whose share is full, the attempt takes its place
// before reading anything, so one over its share costs a fetch and a
// snooze, nothing more; its reads then hold the place for a few
// milliseconds of the receiver's hundreds. Otherwise it reads first, and
// its place holds only the receiver's time.
func (aw *attemptWorker) Work(ctx context.Context, job *river.Job[AttemptArgs]) error {
	w, a := aw.w, job.Args
	if wait := a.NotBefore.Sub(w.Now()); wait > 0 {
		return river.JobSnooze(wait)
	}
	placed := false
	if w.slow(a.AccountID, a.EndpointID) {
		ok, pace := w.take(ctx, a.AccountID, a.EndpointID)
		if !ok {
			return noPlace(ctx, shareWaits(job.Metadata), pace)
		}
		placed = true
	}
	defer func() {
		if placed {
			w.release(a.AccountID, a.EndpointID, 0)
		}
	}()
	st, expected, err := w.Commands.Delivery(ctx, a.DeliveryID)
	if err != nil {
		return err
	}
	if a.Cause == "" && st.Created != nil {
		// Queued by a release or a sweep: the attempt still belongs to
		// the story of the email event its delivery carries.
		story, err := w.Commands.StoryOf(ctx, delivery.Stream(a.DeliveryID))
		if err != nil {
			return err
		}
		a.Cause, a.CorrelationID = story.CausationID, story.CorrelationID
	}
	held := placed
	placed = false // attempt frees it
	return w.attempt(ctx, a, st, expected, held, shareWaits(job.Metadata))
}

// shareWaits is how often the attempt's job found no place within its
// shares so far. River's own snooze count would also count its waits for
// its retry to be due.
func shareWaits(metadata []byte) int {
	var m struct {
		Waits int `json:"share_waits"`
	}
	_ = json.Unmarshal(metadata, &m)
	return m.Waits
}

// noPlace snoozes an attempt that found no place within its shares for
// busy, and counts it in its job's metadata; waits < 0: the attempt has no
// job of its own yet (the fan-out's first attempt).
func noPlace(ctx context.Context, waits int, pace time.Duration) error {
	if waits >= 0 {
		_ = river.MetadataSet(ctx, "share_waits", waits+1)
	}
	return river.JobSnooze(busy(max(waits, 0), pace))
}

// attempt is a's work on the delivery as its stream stands (st, read at
// expected). A river.JobSnoozeError asks for the attempt again later.
// placed: the caller took a's place (take), which attempt frees; waits:
// how often its job found no place so far (shareWaits; -1 without a job).
func (w *Webhooks) attempt(ctx context.Context, a AttemptArgs, st delivery.State, expected eventstore.ExpectedVersion, placed bool, waits int) error {
	defer func() {
		if placed {
			w.release(a.AccountID, a.EndpointID, 0)
		}
	}()
	if st.Created == nil || st.Status != delivery.Pending || st.Attempts >= a.Attempt+1 {
		return nil // ended, or its next attempt is under way
	}
	if st.Created.Erased {
		// Its email was erased: dropped, never sent, and no failure of
		// the endpoint's.
		return w.Commands.DropDelivery(ctx, a.DeliveryID, false, a.meta())
	}
	if a.Listed != nil {
		// A receiver that hears of a delivery finds it listed. Waited for
		// before the endpoint is read: read after, it is seldom to be read
		// again before the post.
		_ = w.Settle(ctx, *a.Listed, projections.WebhooksName)
	}
	ep, held, err := w.endpointFor(ctx, a, st)
	if held || err != nil {
		return err
	}
	read := time.Now()
	if st.Attempts == a.Attempt {
		// Recorded by an earlier run that did not get to queue the next.
		return w.queueNext(ctx, a, st.NextAt)
	}
	if st.Attempts+1 != a.Attempt {
		return nil
	}
	if now := w.Now(); !st.Due(now) {
		return river.JobSnooze(st.NextAt.Sub(now))
	}
	// The shares bound the time spent on receivers; recording is the
	// database's and holds none.
	if !placed {
		ok, pace := w.take(ctx, a.AccountID, a.EndpointID)
		if !ok {
			return noPlace(ctx, waits, pace)
		}
		placed = true // the defer frees it should the post panic
	}
	// The waits above may have outlasted a change of the endpoint that has
	// since been answered (deleted, paused, its secret rotated, its URL
	// moved, its account suspended): the attempt goes by the endpoint as
	// it is now.
	if time.Since(read) > rereadAfter {
		if ep, held, err = w.endpointFor(ctx, a, st); held || err != nil {
			return err
		}
	}
	start := time.Now()
	o, err := w.post(ctx, st.Created, ep.URL, ep.SealedSecret)
	took := time.Since(start)
	w.release(a.AccountID, a.EndpointID, took)
	placed = false
	if err != nil {
		return err
	}
	w.Outcomes.Attempt(o.Succeeded(), took)
	final, disabled, err := w.Commands.RecordAttempt(ctx, st, expected, o, w.Schedule, rand.Float64()*2-1, ep.Clean, a.meta())
	if err != nil {
		return err
	}
	if w.Log != nil && final.Status == delivery.Failed {
		w.Log.Info("webhook delivery failed; no attempt left", "account_id", a.AccountID, "endpoint_id", a.EndpointID,
			"delivery_id", a.DeliveryID, "attempts", final.Attempts, "err", o.Error)
	}
	if w.Log != nil && disabled {
		w.Log.Warn("webhook endpoint disabled after consecutive failed deliveries", "account_id", a.AccountID,
			"endpoint_id", a.EndpointID, "failed_deliveries", webhook.DisableAfterExhausted)
	}
	if final.Status != delivery.Pending || final.Attempts != a.Attempt {
		return nil
	}
	return w.queueNext(ctx, a, final.NextAt)
}

// rereadAfter is how long an attempt may wait for its place before it
// reads its endpoint again: a change answered within it is no later than
// one answered while the post is under way.
const rereadAfter = 10 * time.Millisecond

// endpointFor reads the endpoint of a's delivery as it is now; held says
// the delivery is not to be attempted: the endpoint is deleted (with its
// deliveries), no longer subscribes to the event's type (the delivery is
// dropped, unattempted), or is paused, disabled or its account suspended
// (held, none of its retries spent: resuming or reinstating queues it
// again), or its email was erased since st was read (dropped).
func (w *Webhooks) endpointFor(ctx context.Context, a AttemptArgs, st delivery.State) (ep readapi.AttemptEndpoint, held bool, err error) {
	emailID := st.Created.EmailID
	if st.Created.Test {
		emailID = ""
	}
	ep, err = readapi.EndpointForAttempt(ctx, w.Pool, a.EndpointID, emailID)
	if errors.Is(err, readapi.ErrNotFound) {
		return ep, true, nil
	}
	if err != nil {
		return ep, true, err
	}
	if ep.EmailUnlisted {
		// st holds the payload as read before the waits: an erasure
		// answered since then reads in the streams now, and the payload,
		// which carries the email's addresses and subject, is not sent.
		// The email's EmailErased first: an erasure made by another
		// process may not close the key this one still holds (for up to
		// datakeys' liveFor), so the delivery alone can read as before.
		em, err := w.Commands.Email(ctx, st.Created.EmailID)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return ep, true, err
		}
		if em.Erased != nil {
			return ep, true, w.Commands.DropDelivery(ctx, a.DeliveryID, true, a.meta())
		}
		latest, _, err := w.Commands.Delivery(ctx, a.DeliveryID)
		if err != nil {
			return ep, true, err
		}
		if latest.Created == nil || latest.Created.Erased {
			return ep, true, w.Commands.DropDelivery(ctx, a.DeliveryID, false, a.meta())
		}
	}
	if !st.Created.Test && !slices.Contains(ep.EventTypes, st.Created.Type) {
		return ep, true, w.Commands.DropUnsubscribedDelivery(ctx, a.DeliveryID, a.meta())
	}
	return ep, !ep.Active || ep.Suspended, nil
}

// queueNext queues the attempt after a's, due at (by the domain's clock).
func (w *Webhooks) queueNext(ctx context.Context, a AttemptArgs, at time.Time) error {
	next := AttemptArgs{DeliveryID: a.DeliveryID, Attempt: a.Attempt + 1, AccountID: a.AccountID, EndpointID: a.EndpointID, NotBefore: at,
		Cause: a.Cause, CorrelationID: a.CorrelationID}
	var opts river.InsertOpts
	if wait := at.Sub(w.Now()); wait > scheduleAfter {
		opts.ScheduledAt = time.Now().Add(wait)
	}
	_, err := river.ClientFromContext[pgx.Tx](ctx).Insert(ctx, next, &opts)
	return err
}

// scheduleAfter is the wait beyond which a retry is a scheduled job: River
// makes those available every few seconds, which a short wait would
// overshoot, so a shorter one is snoozed (to the millisecond) by the job.
const scheduleAfter = 10 * time.Second

// post makes one attempt; the error is for what stopped it being made.
func (w *Webhooks) post(ctx context.Context, c *delivery.Created, url, sealed string) (delivery.Outcome, error) {
	var o delivery.Outcome
	secret, err := w.Box.Open(sealed, commands.SecretContext(c.EndpointID))
	if err != nil {
		return o, err
	}
	body := []byte(c.Payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(c.Payload))
	if err != nil {
		return o, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", w.UserAgent)
	req.Header.Set(whsig.HeaderSignature, whsig.Sign(string(secret), body, w.Now()))
	req.Header.Set(whsig.HeaderEventType, c.Type)
	req.Header.Set(whsig.HeaderDeliveryID, c.DeliveryID)
	resp, err := w.Client.Do(req)
	if err != nil {
		o.Error = egress.Describe(err)
		var re *egress.RefusedError
		if w.Log != nil && errors.As(err, &re) {
			// The customer is told "destination not allowed" or "host does
			// not resolve to a public address"; the operator gets who
			// asked for which host, and what it resolved to.
			w.Log.Info("webhook destination refused", "endpoint_id", c.EndpointID, "delivery_id", c.DeliveryID,
				"host", req.URL.Hostname(), "reason", re.Reason, "detail", re.Detail)
		}
		return o, nil
	}
	drain(resp)
	code := resp.StatusCode
	o.ResponseStatus = &code
	o.Error = egress.DescribeStatus(code)
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		o.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), w.Now())
	}
	return o, nil
}

// maxRetryAfter bounds a receiver's Retry-After before it becomes a
// Duration, so a huge number asks for a long wait instead of wrapping round
// to a short one. The schedule's longest wait caps it further.
const maxRetryAfter = 365 * 24 * time.Hour

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// drain reads a little of the body so the connection can be reused.
func drain(resp *http.Response) {
	buf := make([]byte, 4096)
	for i := 0; i < 16; i++ {
		if _, err := resp.Body.Read(buf); err != nil {
			break
		}
	}
	resp.Body.Close()
}
