-- +goose Up
-- When each management token was last used: telemetry like api_key_usage,
-- written without an event and kept outside the projections so a rebuild
-- does not reset it.
CREATE TABLE management_token_usage (
    token_id  text PRIMARY KEY,
    last_used timestamptz NOT NULL
);

-- +goose Down
DROP TABLE management_token_usage;
