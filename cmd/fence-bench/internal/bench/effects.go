package bench

import "fmt"

// EffectsKeys are the metrics of the effects case, set to NaN when it fails
// before reporting them.
var EffectsKeys = []string{"effects_record_vs_intx_ratio", "effects_record_p50_us", "effects_intx_p50_us",
	"effects_delivery_p50_ms", "effects_delivery_p99_ms",
	"effects_relay_delivered_per_s", "effects_river_delivered_per_s", "effects_rivereffects_delivered_per_s",
	"effects_relay_vs_river_ratio"}

// EffectsCase is package effects against its floors, measured by the
// effects bench module (e.EffectsDir, a separate module so that the main
// module does not depend on river) run as `go run . -db <url>`: Record
// against the same row inserted through pgguard's InTx, the delay from a
// Record's commit to the target receiving the request, and a relay's
// throughput against river's InsertTx and workers doing the same delivery.
func EffectsCase() Case {
	const name = "effects"
	return Case{Name: name, Keys: EffectsKeys, Run: func(e *Env) error {
		if e.EffectsDir == "" {
			e.nullMissing(EffectsKeys, "failed: "+name)
			return fmt.Errorf("no effects bench directory (-effects)")
		}
		return runModule(e, name, e.EffectsDir, EffectsKeys, "-db", e.DBURL)
	}}
}
