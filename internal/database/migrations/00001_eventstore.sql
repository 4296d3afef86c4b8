-- +goose Up
-- The event log. Global order is (transaction_id, seq): readers only read
-- below the oldest in-progress transaction id (pg_snapshot_xmin), so an event
-- whose transaction commits late is never skipped by a reader that has
-- already moved past its seq.
CREATE TABLE events (
    transaction_id  xid8        NOT NULL DEFAULT pg_current_xact_id(),
    seq             bigserial   PRIMARY KEY,
    event_id        uuid        NOT NULL UNIQUE,
    stream_id       text        NOT NULL,
    stream_revision bigint      NOT NULL CHECK (stream_revision >= 0),
    event_type      text        NOT NULL,
    schema_version  integer     NOT NULL,
    -- json, not jsonb: the exact bytes are hashed and must round-trip.
    data            json        NOT NULL,
    metadata        json        NOT NULL,
    hash            text        NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (stream_id, stream_revision)
);

CREATE INDEX events_position_idx ON events (transaction_id, seq);

-- One row per stream with its last revision and hash, so an append needs no
-- scan of events to check the expected version or chain the next hash.
CREATE TABLE streams (
    stream_id     text   PRIMARY KEY,
    last_revision bigint NOT NULL,
    last_hash     text   NOT NULL
);

-- +goose Down
DROP TABLE streams;
DROP TABLE events;
