#!/usr/bin/env bash
# Installs Debian's chromium (headless browser for integration/browser) when it
# is missing, and prints its path. Idempotent; needs root (apt-get).
set -euo pipefail
find_chromium() { command -v chromium || command -v chromium-browser || true; }
bin=$(find_chromium)
if [ -z "$bin" ]; then
	echo "[chromium] installing Debian's chromium package" >&2
	export DEBIAN_FRONTEND=noninteractive
	log=$(mktemp)
	if ! { apt-get update -qq && apt-get install -y -qq chromium; } >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "[chromium] apt-get install chromium failed" >&2
		exit 1
	fi
	rm -f "$log"
	bin=$(find_chromium)
fi
if [ -z "$bin" ]; then
	echo "[chromium] not found after install" >&2
	exit 1
fi
echo "$bin"
