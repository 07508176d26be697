package demo

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetBeforeEnd installs a hook that runs just before the end-state checks
// (to tamper with the stored state and prove the checks can fail).
func SetBeforeEnd(cfg *ScenarioConfig, f func(ctx context.Context, pool *pgxpool.Pool, table string, res *Result) error) {
	cfg.beforeEnd = f
}
