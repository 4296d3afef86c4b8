-- +goose Up
-- When the last pass of each background timer began (the domain poller,
-- retention), whichever instance ran it. Every worker instance ticks on
-- its own timer; the one that takes the pass's advisory lock reads and
-- writes its row under that lock, and skips the tick when a pass began
-- within the interval, so the instances run about one pass per interval
-- between them rather than one each.
CREATE TABLE timed_passes (
    name     text        PRIMARY KEY,
    began_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE timed_passes;
