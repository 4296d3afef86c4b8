-- +goose Up
-- An email's recipients as one text, one a line, for the trigram index of
-- the email list's to filter (projections.Emails). An index expression
-- must be IMMUTABLE, and array_to_string is only STABLE (the text of some
-- element types depends on settings); over text it depends on nothing. A
-- pattern without a line break matches this text only within one
-- recipient. It lives here rather than in the projection's schema: a
-- rebuild drops the schema it builds in, with whatever was created there.
CREATE FUNCTION public.email_recipients_text(text[]) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT array_to_string($1, E'\n') $$;

-- +goose Down
DROP FUNCTION public.email_recipients_text(text[]);
