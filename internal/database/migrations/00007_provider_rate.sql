-- +goose Up
-- The token bucket every worker process draws from before handing a message
-- to the provider, so the provider's maximum send rate holds for all of them
-- together. One row per bucket; tokens refill at the configured rate up to
-- one second's worth (see internal/provider/ratelimit).
CREATE TABLE provider_rate_buckets (
    name       text             PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at timestamptz      NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP TABLE provider_rate_buckets;
