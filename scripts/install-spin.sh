#!/usr/bin/env bash
# Install the spin model checker (Debian's `spin` package) when it is missing.
# `make model` calls this before checking model/. spin compiles its verifiers
# with the C compiler, so gcc must be present too. Idempotent; progress on stderr.
set -euo pipefail
log() { printf '[install-spin] %s\n' "$*" >&2; }

if ! command -v gcc >/dev/null 2>&1 && ! command -v cc >/dev/null 2>&1; then
  log "no C compiler (gcc/cc) found: spin needs one to build its verifiers"
  exit 1
fi
if command -v spin >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { log "spin is missing and this user cannot run apt-get (no sudo)"; exit 1; }
  sudo="sudo"
fi
log "installing Debian package spin"
if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q spin >&2; then
  log "apt-get install failed; updating the package lists and retrying"
  $sudo apt-get update -q >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q spin >&2
fi
command -v spin >/dev/null 2>&1 || { log "spin still not on PATH after installing"; exit 1; }
log "installed: $(spin -V 2>&1 | head -n 1)"
