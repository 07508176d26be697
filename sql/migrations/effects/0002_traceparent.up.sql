-- fencekit effects schema, version 2: the record span's trace context.
-- traceparent is the W3C Trace Context traceparent header value of the span
-- that recorded the effect (fencekit.effects.record), written only when the
-- Outbox traces (effects.Config.TracerProvider); NULL otherwise. A relay
-- links each delivery attempt's span (fencekit.effects.deliver) to it.
-- Nothing else reads it: a row without it is delivered the same way.
ALTER TABLE fencekit_effects ADD COLUMN IF NOT EXISTS traceparent text;
