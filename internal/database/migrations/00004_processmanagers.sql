-- +goose Up
-- One row per process manager (watermill handler): the global position of the
-- last event it has finished with. Written only by the instance that holds
-- the handler's advisory lock; it may lag the handler (batched writes), which
-- only causes redelivery after a crash, never a skip.
CREATE TABLE processmanager_checkpoints (
    name             text        PRIMARY KEY,
    commit_position  bigint      NOT NULL DEFAULT 0,
    prepare_position bigint      NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- The poison queue: events a process manager gave up on after its retries.
-- Rows are written by watermill's PoisonQueue middleware through a
-- watermill-sql publisher on topic "processmanager_poison", so the table has
-- the layout of watermill-sql's DefaultPostgreSQLSchema (created_at is
-- timestamptz here; watermill never reads it). A watermill-sql subscriber on
-- the same topic can consume it to re-drive events.
CREATE TABLE watermill_processmanager_poison (
    "offset"         bigserial,
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamptz NOT NULL DEFAULT now(),
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);

-- The poison queue as an operator reads it.
CREATE VIEW processmanager_poison AS
SELECT "offset",
       metadata->>'handler_poisoned' AS handler,
       "uuid"                        AS event_id,
       metadata->>'stream'           AS stream,
       metadata->>'type'             AS type,
       metadata->>'position'         AS position,
       metadata->>'reason_poisoned'  AS error,
       created_at                    AS failed_at
FROM watermill_processmanager_poison;

-- +goose Down
DROP VIEW processmanager_poison;
DROP TABLE watermill_processmanager_poison;
DROP TABLE processmanager_checkpoints;
