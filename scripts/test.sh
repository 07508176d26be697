#!/usr/bin/env bash
# The body of `make test`: every test of the main module and of each nested
# module, then the exec-mode and renewal-mode matrix, in lanes that run at the
# same time. Most of the suite's wall time is tests waiting (leases expiring,
# servers starting, clients timing out), not CPU, so lanes that share nothing
# overlap those waits; every test already runs alongside other packages'
# tests (go test runs packages in parallel) and uses a private schema,
# bucket, key prefix or cluster.
#
# Each lane's output goes to out/test/<lane>.log and is printed whole when
# the lane ends, with its wall time; the exit status is non-zero if any lane
# failed. TEST_LANES=1 runs the lanes one after another (the old order).
#
#   scripts/test.sh            (what make test runs, after services.sh)
#   TEST_LANES=1 scripts/test.sh
#   TEST_THEN="model fuzz" scripts/test.sh   (what .ci/run does)
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TESTFLAGS=${TESTFLAGS:--race -count=1 -timeout 15m}
mkdir -p out/test

# Nested modules: the MCP ones (npm clients, the conformance suite) after
# the others, in one lane.
mapfile -t nested < <(find . -mindepth 2 -name go.mod -not -path './.services/*' -not -path './out/*' -not -path '*/node_modules/*' |
  sed -E 's#^\./##; s#/go\.mod$##' | sort)
mcp=() rest=()
for m in "${nested[@]}"; do
  case $m in examples/mcpserver | mcpfence | cmd/fence-bench/internal/bench/mcpbench) mcp+=("$m") ;; *) rest+=("$m") ;; esac
done

lane_main() {
  # shellcheck disable=SC2086
  $GO test $TESTFLAGS ${PKGS:-./...}
}
lane_modules() {
  local st=0 m
  for m in "$@"; do
    echo "== $m"
    # shellcheck disable=SC2086
    (cd "$m" && $GO test $TESTFLAGS ./...) || st=1
  done
  return $st
}
lane_mcp() { lane_modules "${mcp[@]}"; }
lane_nested() { lane_modules "${rest[@]}"; }
lane_modes() {
  local st=0
  make --no-print-directory test/execmodes || st=1
  make --no-print-directory test/renewalmodes || st=1
  return $st
}

# Two lanes at once: the main module then the exec-mode matrix; the nested
# modules then the MCP ones. The matrix reruns lease's timing tests (TTLs
# of a second, CallTimeouts of a few hundred ms); run beside the main
# module's own lease tests on a two-core machine they missed their
# deadlines, so it follows the main module, which takes longest.
lane_main_modes() {
  local st=0
  lane_main || st=1
  lane_modes || st=1
  return $st
}
# TEST_THEN: make targets run at the end of the nested/MCP lane, which ends
# long before the main one (.ci/run passes "model fuzz": spin and the fuzz
# targets use that lane's idle time instead of running after make test).
lane_nested_mcp() {
  local st=0 t t0
  lane_nested || st=1
  lane_mcp || st=1
  for t in ${TEST_THEN:-}; do
    t0=$(date +%s)
    echo "== make $t"
    make --no-print-directory "$t" || st=1
    echo "== make $t: $(($(date +%s) - t0))s"
  done
  return $st
}

lanes=(main_modes nested_mcp)
declare -A pid start
rm -f out/test/*.end
run_lane() {
  local l=$1 st
  "lane_$l" >"out/test/$l.log" 2>&1
  st=$?
  date +%s >"out/test/$l.end"
  return $st
}
report() {
  local l=$1 st=$2 took=$(($(cat "out/test/$l.end") - ${start[$l]}))
  echo "================ lane $l: $([ "$st" -eq 0 ] && echo ok || echo FAILED) in ${took}s"
  cat "out/test/$l.log"
}

failed=0
if [ "${TEST_LANES:-}" = 1 ]; then
  for l in "${lanes[@]}"; do
    start[$l]=$(date +%s)
    run_lane "$l"; st=$?
    report "$l" $st
    [ $st -eq 0 ] || failed=1
  done
else
  for l in "${lanes[@]}"; do
    start[$l]=$(date +%s)
    run_lane "$l" &
    pid[$l]=$!
  done
  for l in "${lanes[@]}"; do
    wait "${pid[$l]}"; st=$?
    report "$l" $st
    [ $st -eq 0 ] || failed=1
  done
fi
echo "================ make test: $([ $failed -eq 0 ] && echo ok || echo FAILED)"
exit $failed
