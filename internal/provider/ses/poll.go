package ses

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// PollFeedback long-polls the events queue (20 s waits, up to 10 messages)
// until ctx ends, then returns nil. For each message it parses the body and
// calls handle with the result; the message is deleted only after handle
// returned nil. When handle fails the message stays, becomes visible again
// after the queue's visibility timeout and is redelivered, which is why
// handle must be idempotent (Feedback events carry stable FeedbackIDs).
//
// A body that cannot be parsed is logged at error level, by its length and
// why it could not be parsed, and then deleted: parsing is deterministic, so
// redelivery can never succeed, and without a redrive policy the message
// would otherwise come back forever. Its content is not logged: feedback
// names recipients, and logs keep no addresses.
//
// ReceiveMessage failures are logged and retried with backoff (1 s doubling
// up to 30 s). health, when given, hears each failure and the first
// success after them: while the queue cannot be read no bounce or
// complaint is recorded, which the poller alone would not show.
func (p *Provider) PollFeedback(ctx context.Context, handle func(context.Context, []Feedback) error, health func(error)) error {
	if p.cfg.EventsQueueURL == "" {
		return errors.New("ses: PollFeedback: no events queue URL")
	}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		out, err := p.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(p.cfg.EventsQueueURL),
			MaxNumberOfMessages: 10,
			WaitTimeSeconds:     20,
		})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
			p.logger.Warn("ses: receive feedback failed", "queue", p.cfg.EventsQueueURL, "err", err, "retry_in", backoff)
			if health != nil {
				health(err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			continue
		}
		if backoff > 0 && health != nil {
			health(nil)
		}
		backoff = 0
		for _, m := range out.Messages {
			p.process(ctx, m, handle)
		}
	}
	return nil
}

func (p *Provider) process(ctx context.Context, m types.Message, handle func(context.Context, []Feedback) error) {
	id := aws.ToString(m.MessageId)
	body := aws.ToString(m.Body)
	fbs, err := ParseFeedback([]byte(body))
	if err != nil {
		p.logger.Error("ses: unparseable feedback message, deleting it", "sqs_message_id", id, "err", err, "body_bytes", len(body))
	} else if err := handle(ctx, fbs); err != nil {
		p.logger.Warn("ses: handling feedback failed; the message will be redelivered", "sqs_message_id", id, "err", err)
		return
	}
	for _, fb := range fbs {
		switch {
		case fb.EventType == "SNS SubscriptionConfirmation":
			// The topic delivers nothing to the queue until its
			// subscription is confirmed (a topic of another account).
			p.logger.Warn("ses: SNS asks to confirm the events queue's subscription; no feedback arrives until it is confirmed "+
				"(open subscribe_url, or aws sns confirm-subscription)", "sqs_message_id", id, "subscribe_url", fb.SubscribeURL)
		case fb.Ignored: // SES's setup notices among them: nothing to see
			p.logger.Debug("ses: feedback that changes nothing, deleting it", "sqs_message_id", id, "event_type", fb.EventType)
		}
	}
	// Delete even when ctx was cancelled meanwhile (shutdown): the events
	// are appended, so the message is done.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err = p.sqs.DeleteMessage(dctx, &sqs.DeleteMessageInput{
		QueueUrl:      aws.String(p.cfg.EventsQueueURL),
		ReceiptHandle: m.ReceiptHandle,
	})
	if err != nil {
		// Handled but not deleted: it comes back and handle sees it again,
		// which idempotent handling absorbs.
		p.logger.Warn("ses: delete feedback message failed", "sqs_message_id", id, "err", err)
	}
}
