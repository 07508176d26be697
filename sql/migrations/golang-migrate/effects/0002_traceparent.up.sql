-- Code generated from effects/0002_traceparent.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- fencekit effects schema, version 2: the record span's trace context.
-- traceparent is the W3C Trace Context traceparent header value of the span
-- that recorded the effect (fencekit.effects.record), written only when the
-- Outbox traces (effects.Config.TracerProvider); NULL otherwise. A relay
-- links each delivery attempt's span (fencekit.effects.deliver) to it.
-- Nothing else reads it: a row without it is delivered the same way.
ALTER TABLE fencekit_effects ADD COLUMN IF NOT EXISTS traceparent text;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('effects', 2, 'traceparent')
    ON CONFLICT (set_name, version) DO NOTHING;
