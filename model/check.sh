#!/usr/bin/env bash
# Exhaustively check model/fencekit.pml (and model/effects.pml) with spin for every shipped
# configuration (must find no error) and every broken variant (must find a
# counterexample, and the right one: the property named below). Build
# products and trails go to model/.build/<name>/ (git-ignored).
#
#   model/check.sh            all configurations
#   model/check.sh NAME...    only those (names as printed)
#
# Exit status 0 only if every shipped configuration is clean and every broken
# variant produced its counterexample. docs/model.md explains the output.
set -euo pipefail
cd "$(dirname "$0")"
command -v spin >/dev/null || { echo "spin not found: run scripts/install-spin.sh" >&2; exit 1; }
CC=${CC:-gcc}
DEPTH=${MODEL_DEPTH:-10000}
HB="-DHEARTBEAT -DTTL=2 -DTMAX=3 -DMAXTOK=3"

# name | spin -D flags | expected: "ok" or the text of the assertion that must fail
#      | model file, optional, default fencekit.pml
configs=(
  "mem|-DGUARD_MEM|ok"
  "pg|-DGUARD_PG|ok"
  "s3|-DGUARD_S3|ok"
  "takeover-pg|-DGUARD_PG -DTAKEOVER -DMAXTOK=4|ok"
  "broken-draw-before-lock|-DGUARD_MEM -DBROKEN_DRAW_BEFORE_LOCK|(tok>last_grant)"
  "broken-check-then-write-pg|-DGUARD_PG -DBROKEN_CHECK_THEN_WRITE|(tok>=hi)"
  "broken-check-then-write-mem|-DGUARD_MEM -DBROKEN_CHECK_THEN_WRITE|(tok>=hi)"
  "broken-s3-metadata|-DGUARD_S3 -DBROKEN_S3_METADATA|(tok>=hi)"
  "broken-revive|-DGUARD_MEM -DBROKEN_REVIVE| !(lapsed[c])"
  "broken-no-trust|-DGUARD_MEM -DBROKEN_NO_TRUST|(now<gexp[c])"
  "broken-drift|-DGUARD_MEM -DBROKEN_DRIFT|(now<gexp[c])"
  "broken-short-retention|-DGUARD_MEM -DBROKEN_SHORT_RETENTION|(tok>last_grant)"
  "failover-pg|-DGUARD_PG -DFAILOVER -DMAXTOK=4|ok"
  "failover-async-pg|-DGUARD_PG -DFAILOVER -DLOSS -DGAP=4 -DMAXTOK=4 -DNO_JANITOR -DTMAX=4|ok"
  "broken-check-no-compare|-DGUARD_PG -DFAILOVER -DLOSS -DGAP=4 -DMAXTOK=4 -DNO_JANITOR -DTMAX=4 -DBROKEN_CHECK_NO_COMPARE|(tok>last_grant)"
  "async-without-gap|-DGUARD_PG -DFAILOVER -DLOSS -DMAXTOK=4 -DNO_JANITOR -DTMAX=4|(tok>last_grant)"
  # the heartbeat (model/heartbeat.pml): 2 Managers, 2 keys, TTL 2, clock 0..3
  "hb|$HB -DHB_LOCKED_READ|ok"
  "hb-takeover|$HB -DHB_LOCKED_READ -DTAKEOVER -DNO_JANITOR|ok"
  "hb-rolling|$HB -DHB_LOCKED_READ -DROLLING -DTAKEOVER -DNO_JANITOR|ok"
  "hb-plain-read|$HB -DNO_JANITOR|((gown[k]==0)||(gexp[gown[k]]==0))"
  "hb-plain-read-holders|$HB -DNO_JANITOR -DNO_P3DB|ok"
  "broken-hb-ignored|$HB -DHB_LOCKED_READ -DNO_JANITOR -DBROKEN_HB_IGNORED|((gown[k]==0)||(gexp[gown[k]]==0))"
  "broken-hb-snapshot|$HB -DHB_LOCKED_READ -DNO_JANITOR -DBROKEN_HB_SNAPSHOT|((gown[k]==0)||(gexp[gown[k]]==0))"
  "broken-hb-revive|$HB -DHB_LOCKED_READ -DNO_JANITOR -DBROKEN_HB_REVIVE| !(lapsed[hep[c]])"
  "broken-hb-grant-trust|$HB -DHB_LOCKED_READ -DNO_JANITOR -DNO_P5 -DBROKEN_HB_GRANT_TRUST|(now<gexp[ep[c]])"
  # parked grants (Lease.Park, Manager.Resume) in the heartbeat model
  "hb-park|$HB -DHB_LOCKED_READ -DNO_JANITOR -DPARK|ok"
  "broken-resume-any-run|$HB -DHB_LOCKED_READ -DNO_JANITOR -DPARK -DBROKEN_RESUME_ANY_RUN|(rtok==last_grant[rk])"
  # fenced effects (model/effects.pml): record under the lease, relay
  # claim/deliver/outcome under an epoch, CancelDisplaced
  "effects|-DCANCEL|ok|effects.pml"
  "broken-effects-no-lease-check|-DCANCEL -DBROKEN_NO_LEASE_CHECK| !(displaced[1])|effects.pml"
  "broken-effects-unlocked-check|-DCANCEL -DBROKEN_UNLOCKED_CHECK| !(displaced[1])|effects.pml"
  "broken-effects-no-epoch-check|-DCANCEL -DBROKEN_NO_EPOCH_CHECK|(ep[e]==myep)|effects.pml"
  "broken-effects-cancel-claimed|-DCANCEL -DBROKEN_CANCEL_CLAIMED| !(canceled[e])|effects.pml"
  "broken-effects-amo-resend|-DCANCEL -DBROKEN_AMO_RESEND|(applied[e]<=1)|effects.pml"
  "effects-window-any|-DCANCEL -DWINDOW_ANY|(applied[e]<=1)|effects.pml"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w; for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

printf '%-30s %-8s %12s %7s %9s  %s\n' config result states depth seconds note
failed=0
total_start=$(date +%s.%N)
for entry in "${configs[@]}"; do
  IFS='|' read -r name flags expect <<<"$entry"
  # the expectation may contain '|' itself: a model file is a last field
  # ending in .pml
  file=fencekit.pml
  case $expect in *'|'*.pml) file=${expect##*|}; expect=${expect%|*} ;; esac
  selected "$name" || continue
  dir=.build/$name
  rm -rf "$dir"; mkdir -p "$dir"
  cp ./*.pml "$dir/"
  # the clean configurations search millions of states: optimise; the
  # broken ones stop at their first counterexample: compile fast
  opt=-O1; [ "$expect" = ok ] || opt=-O0
  # shellcheck disable=SC2086
  if ! (cd "$dir" && spin $flags -a "$file" >spin.log 2>&1 &&
        $CC $opt -w -DSAFETY -DMEMLIM=4096 -o pan pan.c >cc.log 2>&1); then
    printf '%-30s %-8s  (build failed, see model/%s/)\n' "$name" FAIL "$dir"
    failed=1; continue
  fi
  start=$(date +%s.%N)
  # broken variants: -i keeps searching for shorter trails (a readable
  # counterexample; without -DREACH not always the shortest, which would
  # cost several times the run time); clean ones need a single pass
  search=""; [ "$expect" = ok ] || search=-i
  (cd "$dir" && ./pan -m"$DEPTH" -w24 $search >pan.out 2>&1) || true
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  out=$dir/pan.out
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -n 1)
  states=$(awk '/states, stored/{print $1; exit}' "$out")
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | tail -n 1)
  violated=$(sed -n 's/^pan:1: assertion violated \(.*\) (at depth.*/\1/p' "$out" | head -n 1)
  # with -i the last error reported is the shortest trail found
  tdepth=$(sed -n 's/^pan: reducing search depth to \([0-9]*\)$/\1/p' "$out" | tail -n 1)
  if [ -n "$tdepth" ]; then tdepth=$((tdepth - 1))
  else tdepth=$(sed -n 's/^pan:1: assertion violated .* (at depth \([0-9]*\)).*/\1/p' "$out" | head -n 1); fi
  result=FAIL note=""
  if [ -z "$errors" ] || [ -z "$states" ]; then
    note="pan produced no verdict (model/$dir/pan.out)"
  elif grep -q 'max search depth too small' "$out"; then
    note="depth limit $DEPTH reached: search not exhaustive"
  elif [ "$expect" = ok ]; then
    if [ "$errors" = 0 ]; then result=ok; note="no errors, exhaustive"
    else note="errors: $errors ${violated:-$(grep -m1 -E 'invalid end state|violated' "$out" || true)}"; fi
  else
    if [ "$errors" != 0 ] && [ "$violated" = "$expect" ]; then
      result=ok; note="counterexample: assert$violated, $tdepth steps: model/$dir/$file.trail"
    elif [ "$errors" = 0 ]; then note="no counterexample (expected assert$expect)"
    else note="wrong counterexample: ${violated:-see model/$dir/pan.out} (expected $expect)"; fi
  fi
  [ "$result" = ok ] || failed=1
  printf '%-30s %-8s %12s %7s %9.2f  %s\n' "$name" "$result" "$states" "$depth" "$secs" "$note"
done
printf 'total %.1f s\n' "$(echo "$(date +%s.%N) - $total_start" | bc)"
if [ "$failed" != 0 ]; then
  echo "model check FAILED" >&2
  exit 1
fi
echo "model check passed: shipped configurations clean, every broken variant refuted"
