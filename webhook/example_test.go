package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/mailroom/mailroom/webhook"
)

func ExampleVerifyAt() {
	body := []byte(`{"type":"email.delivered","created_at":"2023-11-14T22:13:20.000Z","data":{"email_id":"em_1"}}`)
	sent := time.Unix(1700000000, 0)
	header := webhook.Sign("whsec_example", body, sent)

	fmt.Println(webhook.VerifyAt("whsec_example", header, body, webhook.DefaultTolerance, sent.Add(time.Minute)))
	fmt.Println(webhook.VerifyAt("example", header, body, webhook.DefaultTolerance, sent.Add(time.Minute)))
	err := webhook.VerifyAt("whsec_example", header, body, webhook.DefaultTolerance, sent.Add(10*time.Minute))
	fmt.Println(errors.Is(err, webhook.ErrTimestampOutOfTolerance))
	// Output:
	// <nil>
	// webhook: no valid signature
	// true
}

func ExampleHandler() {
	var (
		mu   sync.Mutex
		seen = map[string]bool{} // use a durable store with a unique key in production
	)
	h := webhook.Handler(os.Getenv("MAILROOM_WEBHOOK_SECRET"), func(ctx context.Context, deliveryID string, ev webhook.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if seen[deliveryID] {
			return nil // a retry of a delivery already handled
		}
		log.Printf("%s %s at %s", ev.Type, ev.Data.EmailID, ev.CreatedAt)
		seen[deliveryID] = true
		return nil
	})
	http.Handle("POST /mailroom/events", h)
}
