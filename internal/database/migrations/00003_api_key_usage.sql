-- +goose Up
-- When each API key was last used: telemetry, written without an event and
-- kept outside the projections so a rebuild does not reset it.
CREATE TABLE api_key_usage (
    key_id    text PRIMARY KEY,
    last_used timestamptz NOT NULL
);

-- +goose Down
DROP TABLE api_key_usage;
