-- +goose Up
-- One row per projector: the global position it has applied up to, written in
-- the same transaction as its read-model rows.
CREATE TABLE projection_checkpoints (
    name            text PRIMARY KEY,
    commit_position bigint NOT NULL DEFAULT 0,
    prepare_position bigint NOT NULL DEFAULT 0,
    schema_version  integer NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE projection_checkpoints;
