-- The marks table of mysqlguard (marks mode). CreateTable runs this with
-- the configured table name in place of fencekit_guard_marks; apply it with
-- your own migration tool instead if you prefer.
CREATE TABLE IF NOT EXISTS fencekit_guard_marks (
    resource   VARBINARY(512) NOT NULL PRIMARY KEY,
    token      BIGINT         NOT NULL,
    run        VARBINARY(64)  NOT NULL DEFAULT '',
    write_id   VARBINARY(32)  NOT NULL DEFAULT '',
    updated_at TIMESTAMP(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB
