package lease

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidParam is u as a statement parameter. pgx encodes a pgtype.UUID's 16
// bytes as they are (binary) or as its text form (the exec and
// simple_protocol modes); a uuid.UUID would go through its driver.Valuer,
// a string that pgx parses back into bytes, several allocations per
// parameter.
func uuidParam(u uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: u, Valid: true} }
