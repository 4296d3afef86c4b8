package processmanagers

import (
	"errors"
	"fmt"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// errNewerRelease: an event of a type or schema version this release does
// not know, written by a newer release during a rolling upgrade. A process
// manager does not move past it: the reaction it may need is the newer
// release's, and both share one checkpoint, so skipping it would lose that
// reaction for good. The event is delivered again until a process of the
// newer release takes the handler over.
var errNewerRelease = errors.New("event written by a newer release; waiting for a process of that release to take over")

// decodeToReact decodes an event a process manager reacts to.
func decodeToReact(ev eventstore.RecordedEvent) (domain.Event, error) {
	e, known, err := codec.DecodeKnown(ev)
	if err != nil {
		return nil, err
	}
	if !known {
		return nil, fmt.Errorf("%w: %s (schema version %d) at %s", errNewerRelease, ev.Type, ev.SchemaVersion, ev.Position)
	}
	return e, nil
}
