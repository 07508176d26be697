#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME each (default 5s),
# one at a time. Targets are discovered from `func FuzzXxx(f *testing.F)` in
# *_test.go files, so new ones are picked up without editing this script.
# FUZZTIME may also be an execution count ("100000x"), which Go's
# duration-deadline race (golang/go#75804) cannot hit.
# Usage: integration/scripts/fuzz.sh [package-dir-filter]
# A failing input is written by `go test` to <pkg>/testdata/fuzz/<target>/;
# commit it as a regression seed once fixed.
set -euo pipefail
cd "$(dirname "$0")/../.."
FUZZTIME=${FUZZTIME:-5s}
filter=${1:-}
fail=0
count=0
flakes=0
while IFS=: read -r file name; do
	dir=$(dirname "$file")
	if [[ -n "$filter" && "$dir" != *"$filter"* ]]; then continue; fi
	count=$((count + 1))
	echo "== fuzz $dir $name ($FUZZTIME)"
	corpus="$dir/testdata/fuzz/$name"
	before=$(ls "$corpus" 2>/dev/null | sort || true)
	log=$(mktemp)
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel "${FUZZPARALLEL:-1}" "$dir" 2>&1 | tee "$log"; then
		after=$(ls "$corpus" 2>/dev/null | sort || true)
		if [[ "$before" == "$after" ]] && grep -q 'context deadline exceeded' "$log"; then
			# Go's fuzz coordinator can fail a clean run at the -fuzztime
			# boundary (golang/go#75804, unfixed in go1.26): no input was
			# written, so this is not a finding. FUZZTIME=100000x avoids it.
			echo "~~ $dir $name: fuzztime-deadline flake (golang/go#75804), no failing input written; ignored"
			flakes=$((flakes + 1))
		else
			echo "!! $dir $name FAILED (failing input, if any, in $corpus)"
			fail=1
		fi
	fi
	rm -f "$log"
done < <(grep -rHoE --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\)' . \
	| grep -v '/.services/' | sed -E 's/:func (Fuzz[A-Za-z0-9_]+).*/:\1/' | sort -u)
echo "== fuzz: $count target(s), $flakes deadline flake(s) ignored, $( ((fail)) && echo FAILED || echo ok )"
exit $fail
