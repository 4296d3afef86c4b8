-- +goose Up
-- Streams a projector skips because one of their events could not be applied
-- (a value its tables refuse, an event it cannot decode). The row keeps the
-- first skipped event, where `mailroom projections retry` starts again, and
-- the error. The projector goes on with every other stream meanwhile. A
-- rebuild records under "rebuild:<name>" and its swap replaces the rows of
-- <name> with them.
CREATE TABLE projection_quarantine (
    projection       text        NOT NULL,
    stream_id        text        NOT NULL,
    event_id         uuid        NOT NULL,
    event_type       text        NOT NULL,
    stream_revision  bigint      NOT NULL,
    commit_position  bigint      NOT NULL,
    prepare_position bigint      NOT NULL,
    error            text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 1,
    quarantined_at   timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, stream_id)
);

-- A projector whose batches fail for a reason that is not one event's data
-- (a missing table, a lost connection): the last error, written when a batch
-- fails and cleared by the next checkpoint, so other processes can see it.
ALTER TABLE projection_checkpoints
    ADD COLUMN last_error    text,
    ADD COLUMN failures      integer NOT NULL DEFAULT 0,
    ADD COLUMN failing_since timestamptz;

-- +goose Down
ALTER TABLE projection_checkpoints
    DROP COLUMN last_error,
    DROP COLUMN failures,
    DROP COLUMN failing_since;
DROP TABLE projection_quarantine;
