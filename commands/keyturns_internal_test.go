package commands

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

// turnsOfOne is keyTurns with one key made at a time in the process.
func turnsOfOne() *keyTurns {
	k := newKeyTurns()
	k.process = semaphore.NewWeighted(1)
	return k
}

// takeLater asks for a turn in the background; got gets its release.
func takeLater(k *keyTurns, account string, got chan<- func()) {
	go func() {
		release, _ := k.take(context.Background(), account)
		got <- release
	}()
}

func (k *keyTurns) waitingForTheProcess() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.queued
}

func untilQueued(t *testing.T, k *keyTurns, n int) {
	t.Helper()
	for k.waitingForTheProcess() < n {
		time.Sleep(time.Millisecond)
	}
}

// An account making keys in a loop gets one turn at a time: another
// account's key is made right after the key being made, before the first
// account's next.
func TestAnotherAccountsKeyComesBeforeTheNextOfABusyAccount(t *testing.T) {
	k := turnsOfOne()
	first, err := k.take(context.Background(), "busy")
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
		t.Fatal("the busy account's next key was made before the other account's")
	}
	for range cap(busy) {
		(<-busy)()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.account) != 0 {
		t.Fatalf("turns left behind: %v", k.account)
	}
}

// A request that ends while it waits gives its place up.
func TestAKeyNoLongerWantedLeavesTheLine(t *testing.T) {
	k := turnsOfOne()
	release, _ := k.take(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := k.take(ctx, "b")
		done <- err
	}()
	untilQueued(t, k, 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait got a turn")
	}
	release()
	if r, err := k.take(context.Background(), "b"); err != nil {
		t.Fatal(err)
	} else {
		r()
	}
}
