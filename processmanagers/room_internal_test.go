package processmanagers

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/email"
)

// waitingFor reports whether account has an email waiting for room.
func (r *Room) waitingFor(account string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting[account] != nil
}

// takeLater asks for room in the background; the channel gets the lease,
// nil when none came.
func takeLater(r *Room, account string, n int64) <-chan *Lease {
	got := make(chan *Lease, 1)
	go func() {
		lease, _ := r.Take(context.Background(), account, n)
		got <- lease
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
	first.Release()
	second.Release()
	if _, ok := r.Take(ctx, "a", 500); !ok {
		t.Fatal("an email larger than the room was refused; it takes it all")
	}
}

func TestAnAccountWaitsWithOneEmailAtATime(t *testing.T) {
	r := NewRoom(100)
	ctx := context.Background()
	lease, _ := r.Take(ctx, "a", 60)
	second := takeLater(r, "a", 60)
	untilWaiting(t, r, "a")
	if _, ok := r.Take(ctx, "a", 10); ok {
		t.Fatal("a third email took room while the second waits")
	}
	lease.Release()
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
	case lease := <-other:
		if lease == nil {
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

// An account whose email waited long for room and goes back to the queue
// still counts as wanting room until its job asks again.
func TestAnAccountWhoseWaitEndedStillWantsRoom(t *testing.T) {
	r := NewRoom(100)
	var mu sync.Mutex
	now := time.Unix(0, 0)
	r.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	ctx := context.Background()
	if _, ok := r.Take(ctx, "a", 60); !ok {
		t.Fatal("refused")
	}
	r.wait = 50 * time.Millisecond
	go func() { // b's wait lasts its whole length
		untilWaiting(t, r, "b")
		mu.Lock()
		now = now.Add(roomWait)
		mu.Unlock()
	}()
	if _, ok := r.Take(ctx, "b", 50); ok {
		t.Fatal("b found room that a holds")
	}
	mu.Lock()
	now = now.Add(time.Second) // b's job snoozes; a asks meanwhile
	mu.Unlock()
	if _, ok := r.Take(ctx, "a", 30); ok {
		t.Fatal("a took more than its share while b's job waits to ask again")
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
	b, _ := r.Take(ctx, "b", 10)
	b.Release()
	if _, ok := r.Take(ctx, "a", 10); ok {
		t.Fatal("took more than its share while another account asked lately")
	}
	now = now.Add(askedLately + time.Second)
	if _, ok := r.Take(ctx, "a", 10); !ok {
		t.Fatal("refused though no other account wants room any more")
	}
}

// A download whose length turns out small gives the rest of its room back
// at once: another email that waited for it goes ahead; keeping more than
// it holds, or less than nothing, changes nothing.
func TestRoomGivenBackEarlyLetsTheNextEmailIn(t *testing.T) {
	r := NewRoom(100)
	ctx := context.Background()
	download, _ := r.Take(ctx, "a", 90)
	next := takeLater(r, "b", 50)
	untilWaiting(t, r, "b")
	download.ShrinkTo(10) // the download declared 10 bytes
	lease := <-next
	if lease == nil {
		t.Fatal("the room given back let no one in")
	}
	download.ShrinkTo(20)
	download.ShrinkTo(-5)
	download.Release()
	lease.Release()
	var none *Lease
	none.ShrinkTo(1)
	none.Release()
	if all, ok := r.Take(ctx, "c", 100); !ok {
		t.Fatal("room was lost")
	} else {
		all.Release()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.holding) != 0 {
		t.Fatalf("holdings left: %v", r.holding)
	}
}

// An email's attachments never come to more than the attachments' budget,
// however many downloads it names; what is known counts as it is.
func TestMemoryWeightIsTheMostTheAttachmentsMayComeTo(t *testing.T) {
	weight := func(atts ...email.Attachment) int64 {
		return MemoryWeight(email.State{Queued: &email.Queued{Attachments: atts}})
	}
	const rest = 64 << 10
	download := email.Attachment{Path: "https://files.example/a.pdf"}
	most := int64(commands.MaxAttachmentBytes / 4 * 3)
	if got := weight(download); got != rest+most {
		t.Fatalf("one download: %d, want %d", got, rest+most)
	}
	if one, twenty := weight(download), weight(slices.Repeat([]email.Attachment{download}, 20)...); twenty != one {
		t.Fatalf("twenty downloads weigh %d, one %d", twenty, one)
	}
	inline := email.Attachment{Digest: "d", SizeBytes: 3 << 20}
	if got := weight(inline); got != rest+3<<20 {
		t.Fatalf("an inline attachment of 3 MiB: %d", got)
	}
	if got, want := weight(inline, download), rest+3<<20+(commands.MaxAttachmentBytes-email.Base64Size(3<<20))/4*3; got != want {
		t.Fatalf("inline and a download: %d, want %d", got, want)
	}
	if got := weight(); got != rest {
		t.Fatalf("no attachments: %d", got)
	}
}
