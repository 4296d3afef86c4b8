package turns

import (
	"context"
	"testing"
	"time"
)

// takeLater asks for a turn in the background; got gets its release.
func takeLater(k *Turns, account string, got chan<- func()) {
	go func() {
		release, _ := k.Take(context.Background(), account)
		got <- release
	}()
}

func (k *Turns) waitingForTheProcess() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.queued
}

func untilQueued(t *testing.T, k *Turns, n int) {
	t.Helper()
	for k.waitingForTheProcess() < n {
		time.Sleep(time.Millisecond)
	}
}

// An account working in a loop gets one turn at a time: another
// account's work runs right after the work under way, before the first
// account's next.
func TestAnotherAccountComesBeforeTheNextOfABusyAccount(t *testing.T) {
	k := New(1)
	first, err := k.Take(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	busy, other := make(chan func(), 5), make(chan func(), 1)
	for range cap(busy) {
		takeLater(k, "busy", busy)
	}
	takeLater(k, "other", other)
	untilQueued(t, k, 1) // the other account's; the busy one's wait for its own turn
	first()
	select {
	case release := <-other:
		release()
	case <-busy:
		t.Fatal("the busy account's next turn came before the other account's")
	}
	for range cap(busy) {
		(<-busy)()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) != 0 {
		t.Fatalf("turns left behind: %v", k.keys)
	}
}

// A request that ends while it waits gives its place up.
func TestWorkNoLongerWantedLeavesTheLine(t *testing.T) {
	k := New(1)
	release, _ := k.Take(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := k.Take(ctx, "b")
		done <- err
	}()
	untilQueued(t, k, 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait got a turn")
	}
	release()
	if r, err := k.Take(context.Background(), "b"); err != nil {
		t.Fatal(err)
	} else {
		r()
	}
}
