package processmanagers

import (
	"context"
	"testing"
	"time"
)

// waitingFor reports whether account has an email waiting for room.
func (r *Room) waitingFor(account string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting[account] != nil
}

// takeLater asks for room in the background and answers whether it came.
func takeLater(r *Room, account string, n int64) <-chan func() {
	got := make(chan func(), 1)
	go func() {
		release, _ := r.Take(context.Background(), account, n)
		got <- release
	}()
	return got
}

func untilWaiting(t *testing.T, r *Room, account string) {
	t.Helper()
	for !r.waitingFor(account) {
		time.Sleep(time.Millisecond)
	}
}

func TestAnAccountAloneMayFillTheRoom(t *testing.T) {
	r := NewRoom(100)
	ctx := context.Background()
	first, ok := r.Take(ctx, "a", 50)
	if !ok {
		t.Fatal("first half refused")
	}
	second, ok := r.Take(ctx, "a", 50)
	if !ok {
		t.Fatal("second half refused to the only account asking")
	}
	first()
	second()
	if _, ok := r.Take(ctx, "a", 500); !ok {
		t.Fatal("an email larger than the room was refused; it takes it all")
	}
}

func TestAnAccountWaitsWithOneEmailAtATime(t *testing.T) {
	r := NewRoom(100)
	ctx := context.Background()
	release, _ := r.Take(ctx, "a", 60)
	second := takeLater(r, "a", 60)
	untilWaiting(t, r, "a")
	if _, ok := r.Take(ctx, "a", 10); ok {
		t.Fatal("a third email took room while the second waits")
	}
	release()
	if <-second == nil {
		t.Fatal("the waiting email got no room when it was freed")
	}
}

// The case the room is for: an account whose downloads hold room and whose
// next email waits for more does not keep another account's email waiting.
func TestAnAccountOverItsShareStepsAsideForAnother(t *testing.T) {
	r := NewRoom(100)
	r.wait = time.Hour // as if its downloads took that long
	ctx := context.Background()
	if _, ok := r.Take(ctx, "a", 60); !ok {
		t.Fatal("refused")
	}
	next := takeLater(r, "a", 60) // cannot fit until the first ends
	untilWaiting(t, r, "a")

	other := takeLater(r, "b", 30)
	select {
	case release := <-other:
		if release == nil {
			t.Fatal("another account's email found no room beside the first account's")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("another account's email still waits behind the first account's")
	}
	if <-next != nil {
		t.Fatal("the waiting email of the account over its share kept waiting")
	}
	if _, ok := r.Take(ctx, "a", 5); ok {
		t.Fatal("the account over its share took more while another wants room")
	}
}

func TestAShareGrowsBackWhenOthersStopAsking(t *testing.T) {
	r := NewRoom(100)
	now := time.Unix(0, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()
	if _, ok := r.Take(ctx, "a", 60); !ok {
		t.Fatal("refused")
	}
	releaseB, _ := r.Take(ctx, "b", 10)
	releaseB()
	if _, ok := r.Take(ctx, "a", 10); ok {
		t.Fatal("took more than its share while another account asked lately")
	}
	now = now.Add(askedLately + time.Second)
	if _, ok := r.Take(ctx, "a", 10); !ok {
		t.Fatal("refused though no other account wants room any more")
	}
}
