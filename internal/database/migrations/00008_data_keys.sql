-- +goose Up
-- One data key per email, wrapped under the master key. Personal data in
-- events and blobs is encrypted with it; destroying it (wrapped set to
-- NULL) erases that data everywhere while the row stays as a tombstone, so
-- the key can never be created again. See internal/datakeys.
CREATE TABLE data_keys (
    id           text        PRIMARY KEY,
    account_id   text,
    wrapped      text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    destroyed_at timestamptz
);

-- +goose Down
DROP TABLE data_keys;
