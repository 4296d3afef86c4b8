// Command webhook-receiver is a development receiver for Mailroom's
// webhooks: it verifies each delivery's signature, skips deliveries it has
// already handled (same service-delivery-id) and prints each event.
//
//	MAILROOM_WEBHOOK_SECRET=whsec_... go run ./examples/webhook-receiver -addr 127.0.0.1:9000
//
// It keeps its state in memory; a real receiver records delivery ids in a
// durable store, in the same transaction as the work the event causes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mailroom/mailroom/webhook"
)

func main() {
	secret := flag.String("secret", os.Getenv("MAILROOM_WEBHOOK_SECRET"), "the endpoint's signing secret, whsec_... (default $MAILROOM_WEBHOOK_SECRET)")
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on")
	flag.Parse()
	if *secret == "" {
		log.Fatal("MAILROOM_WEBHOOK_SECRET (or -secret) is required: the whsec_... value returned when the endpoint was created or its secret rotated")
	}
	if !strings.HasPrefix(*secret, "whsec_") {
		log.Print("warning: the secret does not start with whsec_; the prefix is part of the signing key")
	}

	srv := &http.Server{
		Addr:              *addr,
		Handler:           newReceiver(os.Stdout).handler(*secret),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second, // Mailroom gives up after 10 s anyway
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("receiving Mailroom webhooks on http://%s/", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// receiver prints events, once per delivery id, and flags those older than
// an event already seen for the same email.
type receiver struct {
	mu     sync.Mutex
	out    io.Writer
	done   map[string]bool      // delivery ids handled
	latest map[string]time.Time // email id → created_at of its newest event
}

func newReceiver(out io.Writer) *receiver {
	return &receiver{out: out, done: map[string]bool{}, latest: map[string]time.Time{}}
}

func (rc *receiver) handler(secret string) http.Handler {
	return webhook.Handler(secret, rc.handle)
}

func (rc *receiver) handle(_ context.Context, deliveryID string, ev webhook.Event) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()

	if rc.done[deliveryID] {
		fmt.Fprintf(rc.out, "duplicate delivery %s (%s), already handled\n", deliveryID, ev.Type)
		return nil // 2xx, so Mailroom stops retrying it
	}

	// Deliveries arrive in any order: created_at decides which state is
	// current. An older event is still recorded, but must not overwrite a
	// newer status.
	order := ""
	if last, ok := rc.latest[ev.Data.EmailID]; ok && ev.CreatedAt.Before(last) {
		order = "  (older than an event already seen for this email)"
	} else {
		rc.latest[ev.Data.EmailID] = ev.CreatedAt
	}

	d := ev.Data
	line := fmt.Sprintf("%s %-16s email=%s delivery=%s to=%q subject=%q",
		ev.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"), ev.Type, d.EmailID, deliveryID, d.To, d.Subject)
	switch {
	case d.BounceType != "" || d.BounceSubtype != "":
		line += fmt.Sprintf(" bounce=%s/%s", d.BounceType, d.BounceSubtype)
	case d.Link != "":
		line += fmt.Sprintf(" link=%q", d.Link)
	case d.Reason != "":
		line += fmt.Sprintf(" reason=%q", d.Reason)
	}
	if len(d.Tags) > 0 {
		line += fmt.Sprintf(" tags=%v", d.Tags)
	}
	if _, err := fmt.Fprintln(rc.out, line+order); err != nil {
		return err // not handled: answer 500 so Mailroom retries
	}
	rc.done[deliveryID] = true
	return nil
}
