#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME each (default 5s),
# one at a time. Targets are discovered from `func FuzzXxx(f *testing.F)` in
# *_test.go files, so new ones are picked up without editing this script.
# Usage: integration/scripts/fuzz.sh [package-dir-filter]
# A failing input is written by `go test` to <pkg>/testdata/fuzz/<target>/;
# commit it as a regression seed once fixed.
set -euo pipefail
cd "$(dirname "$0")/../.."
FUZZTIME=${FUZZTIME:-5s}
filter=${1:-}
fail=0
count=0
while IFS=: read -r file name; do
	dir=$(dirname "$file")
	if [[ -n "$filter" && "$dir" != *"$filter"* ]]; then continue; fi
	count=$((count + 1))
	echo "== fuzz $dir $name ($FUZZTIME)"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel "${FUZZPARALLEL:-1}" "$dir"; then
		echo "!! $dir $name FAILED"
		fail=1
	fi
done < <(grep -rHoE --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\)' . \
	| grep -v '/.services/' | sed -E 's/:func (Fuzz[A-Za-z0-9_]+).*/:\1/' | sort -u)
echo "== fuzz: $count target(s), $( ((fail)) && echo FAILED || echo ok )"
exit $fail
