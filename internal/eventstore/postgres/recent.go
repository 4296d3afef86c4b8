package postgres

import (
	"context"
	"reflect"
	"sort"
	"sync"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// recentLog keeps the newest stretch of $all that this process has read, so
// that the many readers of a process that follow the head of the log
// (every projector, every job reader, every subscription) share one query
// for each new stretch instead of each reading and decoding it again.
//
// It relies on what makes ReadAll safe to resume: a read after P that
// returns events up to E proves that (P, E] holds exactly those events for
// good (only transactions below the oldest running one are read, and no
// later transaction can take a position below it). The window is therefore
// a contiguous, final piece of the log: base, then every event after base up
// to the last one held.
//
// A reader served from the window sees the same events, in the same order,
// as its own query would have; a reader that asks for news (it has read all
// the window) waits for a query that started after it asked, so it can never
// miss an event committed before its call. Readers behind the window (a
// rebuild, a projector catching up) and readers ahead of it query directly.
//
// The window is bounded in events and in bytes, each give or take half as
// much again: events are as large as clients make them, and every process
// that follows the head keeps its own window.
type recentLog struct {
	limit    int // events kept
	maxBytes int // bytes kept, as eventSize counts them

	mu      sync.Mutex
	live    bool   // the window holds the head of the log as of its last read
	epoch   uint64 // counts resets, which void a query in flight
	base    eventstore.Position
	evs     []eventstore.RecordedEvent
	bytes   int           // the eventSize of evs
	reading bool          // a query from the window's end is in flight
	done    chan struct{} // closed when that query ends
	started uint64        // queries started from the window's end
	ended   uint64        // the newest of them that has ended
	more    bool          // that query filled its page: more may be there already
}

// recentChunk is the largest page of the shared query from the window's end.
const recentChunk = 1000

// eventOverhead is what a held event costs besides its data and strings.
var eventOverhead = int(reflect.TypeFor[eventstore.RecordedEvent]().Size())

// eventSize is what the window counts for holding e.
func eventSize(e eventstore.RecordedEvent) int {
	m := e.Metadata
	return eventOverhead + cap(e.Data) + len(e.StreamID) + len(e.Type) + len(e.Hash) +
		len(m.CorrelationID) + len(m.CausationID) + len(m.Actor) + len(m.RequestID) + len(m.ClientRequestID)
}

func newRecentLog(limit, maxBytes int) *recentLog {
	return &recentLog{limit: limit, maxBytes: maxBytes, done: make(chan struct{})}
}

// read is ReadAll through the window; query reads the store itself.
func (w *recentLog) read(ctx context.Context, from eventstore.Position, max int,
	query func(context.Context, eventstore.Position, int) ([]eventstore.RecordedEvent, error)) ([]eventstore.RecordedEvent, error) {
	w.mu.Lock()
	if !w.live || from.Less(w.base) || w.top().Less(from) {
		w.mu.Unlock()
		evs, err := query(ctx, from, max)
		if err == nil && len(evs) < max {
			// This reader is at the head: start the window here if there is
			// none, or if the window lags behind it.
			w.mu.Lock()
			if !w.live || w.top().Less(from) {
				w.reset(from, evs)
			}
			w.mu.Unlock()
		}
		return evs, err
	}
	need := w.started + 1 // a query that starts after this call
	for {
		if out := w.after(from, max); len(out) == max || (w.ended >= need && !w.more) {
			w.mu.Unlock()
			return out, nil
		}
		if w.reading {
			done := w.done
			w.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			w.mu.Lock()
		} else {
			if w.ended >= need {
				need = w.started + 1 // the last query filled its page: read on
			}
			if err := w.extend(ctx, query); err != nil {
				w.mu.Unlock()
				return nil, err
			}
		}
		if !w.live || from.Less(w.base) {
			// The window moved past this reader while it waited.
			w.mu.Unlock()
			return query(ctx, from, max)
		}
	}
}

// extend runs one query from the window's end, with w.mu held on entry and
// on return (released meanwhile), and adds what it finds.
func (w *recentLog) extend(ctx context.Context, query func(context.Context, eventstore.Position, int) ([]eventstore.RecordedEvent, error)) error {
	w.reading = true
	w.started++
	gen, top, epoch, page := w.started, w.top(), w.epoch, w.page()
	w.mu.Unlock()
	evs, err := query(ctx, top, page)
	w.mu.Lock()
	w.reading = false
	close(w.done)
	w.done = make(chan struct{})
	if err != nil {
		return err
	}
	if w.epoch != epoch {
		return nil // reset meanwhile by a reader ahead of the window
	}
	w.ended, w.more = gen, len(evs) == page
	w.add(evs)
	// Past half as much again as a limit, the oldest go, and seldom, so the
	// copy costs each event little.
	if len(w.evs) > w.limit+w.limit/2 || w.bytes > w.maxBytes+w.maxBytes/2 {
		w.trim()
	}
	return nil
}

// page is how many events the next query from the window's end asks for:
// recentChunk, or fewer where the window's events are large, so that one
// query brings at most half the window's bytes and the readers waiting for
// it still find its events held when it ends.
func (w *recentLog) page() int {
	if len(w.evs) == 0 || w.bytes == 0 {
		return recentChunk
	}
	return max(1, min(recentChunk, w.maxBytes/2/(w.bytes/len(w.evs))))
}

// reset makes the window (from, the end of evs]: a read from from that found
// evs and no more.
func (w *recentLog) reset(from eventstore.Position, evs []eventstore.RecordedEvent) {
	w.live, w.base, w.more = true, from, false
	w.epoch++
	w.evs, w.bytes = make([]eventstore.RecordedEvent, 0, len(evs)+recentChunk), 0
	w.add(evs)
	if len(w.evs) > w.limit || w.bytes > w.maxBytes {
		w.trim()
	}
	w.ended = w.started // no query before this one counts as news for a waiter
}

// add appends evs to the window and counts their bytes.
func (w *recentLog) add(evs []eventstore.RecordedEvent) {
	for _, e := range evs {
		w.bytes += eventSize(e)
	}
	w.evs = append(w.evs, evs...)
}

// trim drops the oldest events until the window is within both limits.
// The rest are copied rather than resliced, so the dropped ones can be
// freed. A single event larger than the byte limit leaves the window empty
// at its position: still the head, for the readers that follow.
func (w *recentLog) trim() {
	over := 0
	for over < len(w.evs) && (len(w.evs)-over > w.limit || w.bytes > w.maxBytes) {
		w.bytes -= eventSize(w.evs[over])
		over++
	}
	if over == 0 {
		return
	}
	w.base = w.evs[over-1].Position
	kept := len(w.evs) - over
	w.evs = append(make([]eventstore.RecordedEvent, 0, kept+kept/2+recentChunk), w.evs[over:]...)
}

// top is the position of the window's last event, or its base.
func (w *recentLog) top() eventstore.Position {
	if len(w.evs) == 0 {
		return w.base
	}
	return w.evs[len(w.evs)-1].Position
}

// after copies up to max events of the window positioned after from. The
// events' data is shared: readers only decode it.
func (w *recentLog) after(from eventstore.Position, max int) []eventstore.RecordedEvent {
	i := sort.Search(len(w.evs), func(i int) bool { return from.Less(w.evs[i].Position) })
	n := min(len(w.evs)-i, max)
	if n == 0 {
		return nil
	}
	return append(make([]eventstore.RecordedEvent, 0, n), w.evs[i:i+n]...)
}
