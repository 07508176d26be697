package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/fileguard"
)

// RatioBlocks is how many blocks of consecutive rounds a guard ratio is
// taken over (the reported value is the median of the blocks' ratios).
const RatioBlocks = ratioBlocks

// GuardRatio is the metric of an interleaved guard comparison: side b's
// cost per operation over side a's, the median over RatioBlocks blocks of
// rounds, with its spread; target > 0 sets an at-most target.
func GuardRatio(in *Interleaved, key string, b, a int, target float64, note string) Metric {
	_, sp := in.Ratio(b, a, RatioBlocks)
	m := Metric{Key: key, Value: sp.Median, Unit: "x", Note: note, Spread: &sp}
	if target > 0 {
		m.Target, m.Cmp = target, AtMost
	}
	return m
}

// Keys of the store guard cases, set to NaN when a case fails before
// reporting them.
var (
	FileGuardKeys  = []string{"file_guard_ratio", "file_same_size_ratio", "file_write_us"}
	RedisGuardKeys = []string{"redis_guard_ratio", "redis_guard_vs_redislock_ratio", "redis_guard_vs_redsync_ratio", "redislock_set_ratio", "redsync_set_ratio", "redis_script_floor_ratio", "redis_set_us"}
	MySQLGuardKeys = []string{"mysql_guard_rows_ratio", "mysql_conditional_floor_ratio", "mysql_guard_intx_ratio", "mysql_upsert_us", "mysql_write_tx_us"}
	NATSGuardKeys  = []string{"nats_guard_ratio", "nats_put_us"}
)

// FileGuard measures guards/fileguard against the same store's plain
// durable write (temporary file, fsync, rename, directory fsync) of 4 KiB,
// one file each, interleaved operation by operation, in a fresh directory
// under the system's temporary directory (os.TempDir). A third side writes
// plainly as many bytes as the guarded file holds (header and content),
// which separates the cost of the header's bytes from the guard's work.
func FileGuard(e *Env) (err error) {
	defer func() {
		if err != nil {
			e.nullMissing(FileGuardKeys, "failed: file_guard")
		}
	}()
	dir, err := os.MkdirTemp("", "fence-bench-files-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	g, err := fileguard.New(fileguard.Config{Dir: dir})
	if err != nil {
		return err
	}
	body := bytes.Repeat([]byte("x"), 4<<10)
	plainDir := filepath.Join(dir, "plain")
	if err := os.MkdirAll(plainDir, 0o750); err != nil {
		return err
	}
	plain := func(int) error { return durableWrite(filepath.Join(plainDir, "doc"), body) }
	ctx, run := e.Ctx, benchRun()
	var tok fence.Token
	guarded := func(int) error {
		tok++
		return g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok, Run: run}), "guarded/doc", body)
	}
	var sized []byte // as long as the guarded file, measured after its warm-up write
	sameSize := func(round int) error {
		if round < 0 {
			fi, err := os.Stat(g.Path("guarded/doc"))
			if err != nil {
				return err
			}
			sized = bytes.Repeat([]byte("x"), int(fi.Size()))
		}
		return durableWrite(filepath.Join(plainDir, "sized"), sized)
	}
	n := 1000
	if e.Quick {
		n = 60
	}
	in, err := Interleave([]Op{{"plain durable write", plain}, {"fileguard Put", guarded}, {"plain write of the guarded file's size", sameSize}}, n, time.Time{})
	if err != nil {
		return err
	}
	e.Report.Add(GuardRatio(in, "file_guard_ratio", 1, 0, 1.10, fmt.Sprintf(
		"fileguard Put (flock, header read, temp+fsync+rename+dir fsync) vs the same write unguarded, 4 KiB, %s; %d rounds of 3 sides interleaved, median of %d blocks",
		fsName(dir), in.Rounds(), RatioBlocks)))
	e.Report.Add(GuardRatio(in, "file_same_size_ratio", 1, 2, 0, fmt.Sprintf(
		"fileguard Put vs a plain durable write of as many bytes as the guarded file (%d: header + 4 KiB)", len(sized))))
	e.Report.Add(Metric{Key: "file_write_us", Value: float64(in.PerOp(0)) / 1e3, Unit: "µs", Note: "unguarded durable write of 4 KiB"})
	return nil
}

// durableWrite is the plain write FileGuard compares with: a temporary
// file in the same directory, fsync, rename, directory fsync.
func durableWrite(path string, body []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644) //nolint:gosec // a path in the bench's own temporary directory
	if err != nil {
		return err
	}
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path)) //nolint:gosec // the bench's own temporary directory
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// fsName names the file system of dir ("ext4 on /dev/vda") from
// /proc/self/mounts, or "file system unknown".
func fsName(dir string) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "file system unknown"
	}
	best, name := -1, "file system unknown"
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if (dir == f[1] || strings.HasPrefix(dir, strings.TrimSuffix(f[1], "/")+"/")) && len(f[1]) > best {
			best, name = len(f[1]), f[2]+" on "+f[0]
		}
	}
	return name
}

// StoreCase is a case measured by the store bench module (the storesbench
// directory beside this package: a separate module, so that the main
// module does not depend on the Redis, MySQL and NATS clients), run with
// the go command as `go run . -only <store>` in e.StoresDir. Its metrics
// come back as lines of JSON (WriteMetricLines).
func StoreCase(name, store string, keys []string) Case {
	return Case{Name: name, Keys: keys, Run: func(e *Env) error {
		if e.StoresDir == "" {
			e.nullMissing(keys, "failed: "+name)
			return fmt.Errorf("no store bench directory (-stores)")
		}
		return runModule(e, name, e.StoresDir, keys, "-only", store)
	}}
}

// PGLockGuardCase is pgguard's marks mode against a write protected by
// cirello.io/pglock (PGGuardVsLock), measured by the pglock peer module
// (e.PeerDir, a separate module so that the main module does not depend on
// pglock and lib/pq) run as `go run . -guard -db <url>`.
func PGLockGuardCase() Case {
	const name = "pg_guard_pglock"
	return Case{Name: name, Keys: PGLockGuardKeys, Run: func(e *Env) error {
		if e.PeerDir == "" {
			e.nullMissing(PGLockGuardKeys, "failed: "+name)
			return fmt.Errorf("no pglock peer directory (-peer)")
		}
		return runModule(e, name, e.PeerDir, PGLockGuardKeys, "-guard", "-db", e.DBURL)
	}}
}

// runModule runs `go run . args...` (plus -quick in a quick run) in the
// nested bench module dir and adds the metric lines it prints to the
// report; on failure the keys not reported are set to NaN.
func runModule(e *Env, name, dir string, keys []string, args ...string) (err error) {
	defer func() {
		if err != nil {
			e.nullMissing(keys, "failed: "+name)
		}
	}()
	args = append([]string{"run", "."}, args...)
	if e.Quick {
		args = append(args, "-quick")
	}
	cmd := exec.CommandContext(e.Ctx, "go", args...) //nolint:gosec // the go command on the repository's own bench module
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	if e.Log != nil {
		cmd.Stderr = e.Log
	}
	runErr := cmd.Run()
	ms, perr := ReadMetricLines(&out)
	for _, m := range ms {
		e.Report.Add(m)
	}
	if runErr != nil {
		return fmt.Errorf("%s: bench module in %s: %w", name, dir, runErr)
	}
	return perr
}

// metricLine is a Metric as one line of JSON: NaN becomes null.
type metricLine struct {
	Key    string   `json:"key"`
	Value  *float64 `json:"value"`
	Unit   string   `json:"unit,omitempty"`
	Target float64  `json:"target,omitempty"`
	Cmp    Cmp      `json:"cmp,omitempty"`
	Note   string   `json:"note,omitempty"`
	Spread *[4]any  `json:"spread,omitempty"` // min, median, max, rounds
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// WriteMetricLines writes ms to w, one JSON object per line.
func WriteMetricLines(w io.Writer, ms []Metric) error {
	enc := json.NewEncoder(w)
	for _, m := range ms {
		l := metricLine{Key: m.Key, Value: finite(m.Value), Unit: m.Unit, Target: m.Target, Cmp: m.Cmp, Note: m.Note}
		if m.Spread != nil {
			l.Spread = &[4]any{finite(m.Spread.Min), finite(m.Spread.Median), finite(m.Spread.Max), m.Spread.N}
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return nil
}

// ReadMetricLines reads what WriteMetricLines wrote.
func ReadMetricLines(r io.Reader) ([]Metric, error) {
	var out []Metric
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l struct {
			metricLine
			Spread *[4]json.RawMessage `json:"spread"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return out, fmt.Errorf("metric line %q: %w", sc.Text(), err)
		}
		m := Metric{Key: l.Key, Value: math.NaN(), Unit: l.Unit, Target: l.Target, Cmp: l.Cmp, Note: l.Note}
		if l.Value != nil {
			m.Value = *l.Value
		}
		if l.Spread != nil {
			num := func(raw json.RawMessage) float64 {
				var v *float64
				if json.Unmarshal(raw, &v) != nil || v == nil {
					return math.NaN()
				}
				return *v
			}
			var n int
			_ = json.Unmarshal(l.Spread[3], &n)
			m.Spread = &Spread{Min: num(l.Spread[0]), Median: num(l.Spread[1]), Max: num(l.Spread[2]), N: n}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// StoreEnv is the Env a store bench program runs its cases in: context,
// mode and an empty report, progress on stderr.
func StoreEnv(ctx context.Context, quick bool) *Env {
	return &Env{Ctx: ctx, Quick: quick, Report: &Report{Info: map[string]any{}}, Log: os.Stderr}
}

// NullMissing sets every key of keys not yet reported to NaN with note.
func (e *Env) NullMissing(keys []string, note string) { e.nullMissing(keys, note) }

// RunIdentity is a run identity for the bench's claims (a canonical
// UUID's text, as a lease's context carries).
func RunIdentity() string { return benchRun() }
